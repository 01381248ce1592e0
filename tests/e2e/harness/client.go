package harness

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/takoform/queuehost/internal/apiclient"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// The Host API client is internal/apiclient, shared with the torture driver,
// the benchmarks and the server and host tests.
type (
	Client    = apiclient.Client
	Response  = apiclient.Response
	Problem   = apiclient.Problem
	Resource  = apiclient.Resource
	Operation = apiclient.Operation
)

// Form URLs, matched exactly by the host.
const (
	FormQueue    = apiclient.FormQueue
	FormConsumer = apiclient.FormConsumer
	FormWorker   = apiclient.FormWorker
	FormVersion  = apiclient.FormVersion
)

// Ref is a {resourceUid} reference.
func Ref(uid string) map[string]any { return apiclient.Ref(uid) }

// Principal is one host.json principal with its clear token.
type Principal struct {
	Name   string
	Token  string
	Grants []Grant
}

// Grant is one host.json grant.
type Grant struct {
	Space string   `json:"space"`
	Role  string   `json:"role"`
	Forms []string `json:"forms,omitempty"`
}

// NewToken returns a random bearer token.
func NewToken() string {
	b := make([]byte, 24)
	rand.Read(b)
	return "tok-" + hex.EncodeToString(b)
}

// WriteHostJSON writes <dataDir>/host.json with the principals (tokens
// stored as SHA-256 hex, the documented format) and allowed fetch hosts.
func WriteHostJSON(dataDir string, ps []Principal, allowFetch []string) error {
	type jp struct {
		Name        string  `json:"name"`
		TokenSha256 string  `json:"tokenSha256"`
		Grants      []Grant `json:"grants"`
	}
	doc := struct {
		Principals        []jp     `json:"principals"`
		AllowedFetchHosts []string `json:"allowedFetchHosts"`
	}{AllowedFetchHosts: allowFetch}
	if doc.AllowedFetchHosts == nil {
		doc.AllowedFetchHosts = []string{}
	}
	for _, p := range ps {
		sum := sha256.Sum256([]byte(p.Token))
		doc.Principals = append(doc.Principals, jp{Name: p.Name, TokenSha256: hex.EncodeToString(sum[:]), Grants: p.Grants})
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dataDir, "host.json"), append(b, '\n'), 0o600)
}

// Poll calls check every 50 ms until it returns nil or timeout passes.
func Poll(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %w", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Counter is a goroutine-safe string counter.
type Counter struct {
	mu sync.Mutex
	m  map[string]int
}

// Add adds one to k.
func (c *Counter) Add(k string) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[k]++
	c.mu.Unlock()
}

// Snapshot copies the counts.
func (c *Counter) Snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.m {
		out[k] = v
	}
	return out
}
