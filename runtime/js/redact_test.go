package js

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/takoform/queuehost/abi"
)

const redactWorker = `export default {
  async fetch(request, env) {
    console.log("token is " + env.TOKEN + ", pin is " + env.PIN + ", region " + env.REGION);
    throw new Error("the upstream refused " + env.TOKEN);
  },
};`

// A worker's log, which viewers read, never shows the version's secret
// values, whether the code logs one or an exception quotes it; plain vars
// and secrets shorter than MinRedactedSecret stay as they are (#14).
func TestLogsHideSecretValues(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	v := &abi.Version{UID: "v-redact", Space: "space-1", WorkerUID: "w-redact", Principal: "alice", MainModule: "main.js",
		Modules: []abi.Module{{Name: "main.js", Content: redactWorker}},
		Vars:    map[string]string{"REGION": "eu-west"},
		Secrets: map[string]string{"TOKEN": "s3cr3t-token-value", "PIN": "123"}}
	resp, err := rt.Fetch(t.Context(), v, httptest.NewRequest(http.MethodGet, "http://worker.example/", nil), "/")
	if err == nil {
		resp.Body.Close()
	}
	var all []string
	for _, e := range rt.Logs(v.WorkerUID, 0, 100) {
		all = append(all, e.Level+": "+e.Message)
	}
	text := strings.Join(all, "\n")
	if strings.Contains(text, "s3cr3t-token-value") {
		t.Fatalf("a secret value is in the worker's log:\n%s", text)
	}
	if strings.Count(text, "[secret TOKEN]") < 2 || !strings.Contains(text, "pin is 123") || !strings.Contains(text, "region eu-west") {
		t.Fatalf("want the secret replaced in the log line and the exception, the rest kept:\n%s", text)
	}
}
