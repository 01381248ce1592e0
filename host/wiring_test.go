package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
)

// A failed send shows the worker its Form code without the store's text
// (which names the host's files); the host's log keeps the cause (#14).
func TestWorkerSendErrorHidesTheHostsFiles(t *testing.T) {
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	cause := fmt.Errorf("%w: journal: write /srv/takohost/data/0000000000000007.wal: input/output error", store.ErrUnavailable)
	err := workerSendError(log, "q1", fmt.Errorf("%w: %w", abi.ErrBackendUnavailable, cause))
	if abi.Code(err) != "backend_unavailable" || strings.Contains(err.Error(), "/srv/") || strings.Contains(err.Error(), ".wal") {
		t.Fatalf("the worker sees %q (code %s)", err, abi.Code(err))
	}
	if !strings.Contains(logged.String(), "0000000000000007.wal") {
		t.Fatalf("the host's log lost the cause: %s", logged.String())
	}
	full := workerSendError(log, "q1", fmt.Errorf("%w: %w", abi.ErrBackendUnavailable, fmt.Errorf("%w: /srv/x", store.ErrNoSpace)))
	if !strings.Contains(full.Error(), "disk is nearly full") || strings.Contains(full.Error(), "/srv/") {
		t.Fatalf("disk full: %q", full)
	}
	// The Form's other codes and an unknown queue pass through unchanged.
	for _, e := range []error{abi.ErrInvalidBody, abi.ErrMessageTooLarge, abi.ErrBatchTooLarge, abi.ErrUnknownQueue, nil} {
		if got := workerSendError(log, "q1", e); !errors.Is(got, e) && got != e {
			t.Errorf("%v became %v", e, got)
		}
	}
}

// A data directory of before principal IDs: host.json without IDs, and a
// WorkerVersion whose record names its creator by name. The first start
// migrates host.json (each principal keeps its name as legacyName) and the
// old version keeps sending as its creator; once that principal is
// replaced by a new one of the same name, the old version no longer sends
// (#14: authority follows the ID, not the name).
func TestLegacyCreatorNames(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "data")
	h := startHost(t, dir)
	admin := newClient(t, h.URL(), h.AdminToken())
	q := admin.create("tasks", schemas.FormAtLeastOnceQueue, map[string]any{"messageRetentionSeconds": 3600})
	w := admin.create("w", schemas.FormModuleWorker, map[string]any{"handlers": []string{"fetch"}})
	v := admin.create("w-v1", schemas.FormWorkerVersion, map[string]any{
		"worker": map[string]any{"resourceUid": w}, "mainModule": "main.js",
		"modules":               []any{map[string]any{"name": "main.js", "content": workerModule}},
		"queueProducerBindings": []any{map[string]any{"name": "TASKS", "resource": map[string]any{"resourceUid": q}}},
	})
	if st, op, raw := admin.do("PUT", "/v2/spaces/demo/resources/"+w, map[string]any{"spec": map[string]any{"handlers": []string{"fetch"}, "version": map[string]any{"resourceUid": v}}}); st != 202 {
		t.Fatalf("select: %d %s", st, raw)
	} else {
		admin.do("GET", "/v2/spaces/demo/operations/"+op["id"].(string)+"?wait=10", nil)
	}
	adminTok := h.AdminToken()
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	// Make it the data directory an older host left: alice created the
	// version, and host.json has no IDs.
	st, _, err := store.Open(ctx, dir, store.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := st.Resource(ctx, v)
	if err != nil {
		t.Fatal(err)
	}
	rec.Creator = "alice"
	if err := st.Apply(ctx, store.PutResource{Resource: rec}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	legacy := func(alice string) {
		t.Helper()
		doc := map[string]any{"principals": []any{
			map[string]any{"name": "admin", "tokenSha256": auth.HashToken(adminTok), "grants": []any{map[string]any{"space": "*", "role": "editor"}}},
			map[string]any{"name": "alice", "tokenSha256": auth.HashToken(alice), "grants": []any{map[string]any{"space": "demo", "role": "editor"}}},
		}}
		b, _ := json.Marshal(doc)
		if err := os.WriteFile(filepath.Join(dir, auth.ConfigFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	legacy("alice-token-1")

	fetch := func(h *Host) string {
		t.Helper()
		req, _ := http.NewRequest("GET", h.URL()+"/v2/spaces/demo/resources/"+w+"/fetch/x", nil)
		req.Header.Set("Authorization", "Bearer "+adminTok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return fmt.Sprintf("%d %s", res.StatusCode, b)
	}
	h = startHost(t, dir)
	if got := fetch(h); got != "200 sent true" {
		t.Fatalf("after the migration, the legacy version of alice does not send: %s", got)
	}
	cfg, err := auth.Load(filepath.Join(dir, auth.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := cfg.Principal("alice"); a.ID == "" || a.LegacyName != "alice" || !cfg.PrincipalIDs {
		t.Fatalf("host.json after the first start: %+v", cfg)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	// alice is replaced by a new principal of the same name, added by hand
	// without an ID (host.json is migrated now).
	kept := cfg.Principals[:0]
	for _, p := range cfg.Principals {
		if p.Name != "alice" {
			kept = append(kept, p)
		}
	}
	cfg.Principals = append(kept, auth.Principal{Name: "alice", TokenSHA256: auth.HashToken("alice-token-2"), Grants: []auth.Grant{{Space: "demo", Role: auth.RoleEditor}}})
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, auth.ConfigFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	h = startHost(t, dir)
	defer h.Shutdown(context.Background())
	if got := fetch(h); strings.Contains(got, "sent true") {
		t.Fatalf("a new alice revived the old alice's version: %s", got)
	}
}
