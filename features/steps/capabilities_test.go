package steps

import (
	"strings"
	"testing"
)

func TestParseCapabilitiesDoc(t *testing.T) {
	d, err := ParseCapabilitiesDoc([]byte(`{"host": {"name": "h", "version": "1"}, "capabilities": ["restart", "ext-tracing"], "handlerTimeoutSeconds": 30}`))
	if err != nil {
		t.Fatal(err)
	}
	if d.Host.Name != "h" || len(d.Capabilities) != 2 || d.HandlerTimeoutSeconds != 30 {
		t.Fatalf("decoded %+v", d)
	}
	for doc, want := range map[string]string{
		`{}`: `"capabilities" is required`,
		`{"capabilities": ["restart", "restart"]}`: "listed twice",
		`{"capabilities": ["teleport"]}`:           "unknown capability",
		`{"capabilities": ["ext-"]}`:               "unknown capability",
		`{"capabilities": [], "extra": 1}`:         "unknown field",
		`{"capabilities": [], "host": {}}`:         "host.name",
		`{"capabilities": []} {}`:                  "more than one",
	} {
		if _, err := ParseCapabilitiesDoc([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error saying %q", doc, err, want)
		}
	}
}

func TestRequiredCapabilities(t *testing.T) {
	got := requiredCapabilities(map[string]bool{"@restart": true, "@store-faults": true, "@ext-x": true, "@batch": true, "@QC-DELIV-1": true})
	if strings.Join(got, ",") != "ext-x,restart,store-faults" {
		t.Fatalf("got %v", got)
	}
}
