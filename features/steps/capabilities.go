package steps

// Capabilities: what a host declares it supports beyond the Forms' core.
//
// A scenario that needs an optional capability is tagged with it (@restart,
// @store-faults, @handler-limit, @ext-NAME for a host extension). The host
// declares its capabilities in a capabilities document
// (features/capabilities.schema.json) or the runner's --capabilities flag.
// A scenario needing a capability the host does not declare is "not
// applicable" — it says nothing about the host. A scenario the host's
// declarations make applicable but the run cannot carry out (a missing
// token, hook or time limit) is "skipped": it has not passed, and a
// certified run fails on it.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// The capabilities the kit knows, besides host extensions (ext-NAME).
const (
	CapRestart      = "restart"       // the runner can restart the host (--restart-cmd)
	CapStoreFaults  = "store-faults"  // the host implements the fault vocabulary (--fault-cmd)
	CapHandlerLimit = "handler-limit" // the host has a handler time limit the kit is told (--handler-timeout)
	// CapObservationControl: the host can pause its observation of a
	// space's resources on command (the fault hook's pause-observation).
	CapObservationControl = "observation-control"
)

// KnownCapabilities lists the capabilities the kit's scenarios use, ext-NAME
// aside.
var KnownCapabilities = []string{CapRestart, CapStoreFaults, CapHandlerLimit, CapObservationControl}

var capabilityRE = regexp.MustCompile(`^(restart|store-faults|handler-limit|observation-control|ext-[a-z0-9][a-z0-9-]*)$`)

// ValidCapability reports whether name is a capability the kit knows or a
// well-formed host extension.
func ValidCapability(name string) error {
	if !capabilityRE.MatchString(name) {
		return fmt.Errorf("unknown capability %q (one of %s, or ext-NAME with NAME of a-z, 0-9 and -)", name, strings.Join(KnownCapabilities, ", "))
	}
	return nil
}

// CapabilitiesDoc is a host's capabilities document, as
// features/capabilities.schema.json describes it.
type CapabilitiesDoc struct {
	Host                  *HostInfo `json:"host,omitempty"`
	Capabilities          []string  `json:"capabilities"`
	HandlerTimeoutSeconds float64   `json:"handlerTimeoutSeconds,omitempty"`
}

// HostInfo names the host under test in reports.
type HostInfo struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
}

// ParseCapabilitiesDoc decodes and checks a capabilities document: closed
// objects, known or ext- capabilities, no duplicates, a positive time limit.
func ParseCapabilitiesDoc(b []byte) (*CapabilitiesDoc, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	var doc CapabilitiesDoc
	if err := d.Decode(&doc); err != nil {
		return nil, fmt.Errorf("capabilities document: %w", err)
	}
	if d.More() {
		return nil, fmt.Errorf("capabilities document: more than one JSON value")
	}
	if doc.Capabilities == nil {
		return nil, fmt.Errorf("capabilities document: \"capabilities\" is required (an empty list declares none)")
	}
	seen := map[string]bool{}
	for _, c := range doc.Capabilities {
		if err := ValidCapability(c); err != nil {
			return nil, fmt.Errorf("capabilities document: %w", err)
		}
		if seen[c] {
			return nil, fmt.Errorf("capabilities document: %q is listed twice", c)
		}
		seen[c] = true
	}
	if doc.HandlerTimeoutSeconds < 0 {
		return nil, fmt.Errorf("capabilities document: handlerTimeoutSeconds must be positive")
	}
	if doc.Host != nil && doc.Host.Name == "" {
		return nil, fmt.Errorf("capabilities document: host.name is required when host is given")
	}
	return &doc, nil
}

// requiredCapabilities are the capabilities a scenario's tags ask for.
func requiredCapabilities(tags map[string]bool) []string {
	var out []string
	for t := range tags {
		name := strings.TrimPrefix(t, "@")
		if slices.Contains(KnownCapabilities, name) || strings.HasPrefix(name, "ext-") {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// hookMissing is why a declared capability cannot be exercised in this run,
// or "" when it can.
func (k *Kit) hookMissing(capability string) string {
	switch capability {
	case CapRestart:
		if k.cfg.Restart == nil {
			return "the host declares restart, but the runner has no host control: pass --restart-cmd"
		}
	case CapStoreFaults:
		if k.cfg.Fault == nil {
			return "the host declares store-faults, but the runner has no fault control: pass --fault-cmd"
		}
	case CapObservationControl:
		if k.cfg.Fault == nil {
			return "the host declares observation-control, but the runner has no host control: pass --fault-cmd"
		}
	case CapHandlerLimit:
		if k.cfg.HandlerTimeout <= 0 {
			return "the host declares handler-limit, but its time limit is unknown: pass --handler-timeout or handlerTimeoutSeconds"
		}
	}
	return ""
}
