package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/host"
	"github.com/takoform/queuehost/internal/apiclient"
)

const (
	formQueue    = api.FormAtLeastOnceQueue
	formWorker   = api.FormModuleWorker
	formVersion  = api.FormWorkerVersion
	formConsumer = api.FormQueueConsumer
	benchSpace   = "bench"
)

// apiClient is the benchmark's Host API client: internal/apiclient with
// keep-alive connections for conns clients.
type apiClient struct{ *apiclient.Client }

func newAPIClient(base, token string, conns int) *apiClient {
	tr := &http.Transport{MaxIdleConns: conns * 2, MaxIdleConnsPerHost: conns * 2, MaxConnsPerHost: 0, IdleConnTimeout: time.Minute}
	return &apiClient{&apiclient.Client{Base: base, Token: token, HTTP: &http.Client{Transport: tr}, Timeout: 2 * time.Minute}}
}

// do sends one request; an answer of 300 or more is an error.
func (c *apiClient) do(ctx context.Context, method, path string, body any) (int, error) {
	r, err := c.Do(ctx, method, path, body, nil)
	if err != nil {
		return 0, err
	}
	if r.Status >= 300 {
		return r.Status, fmt.Errorf("%s %s: %d %s", method, path, r.Status, bytes.TrimSpace(r.Body))
	}
	return r.Status, nil
}

// create creates a resource and waits for its Operation; it returns the UID.
func (c *apiClient) create(ctx context.Context, name, form string, spec any) (string, error) {
	return c.Create(ctx, benchSpace, name, form, spec, nil)
}

func (c *apiClient) update(ctx context.Context, uid string, spec any) error {
	return c.Put(ctx, benchSpace, uid, spec)
}

type ref struct {
	ResourceUID string `json:"resourceUid"`
}

// benchHost is a host on 127.0.0.1 with a queue and a worker whose
// selected version binds the queue as env.Q.
type benchHost struct {
	h      *host.Host
	c      *apiClient
	dir    string
	queue  string
	worker string
}

func (b *bench) startHost(ctx context.Context, conns int) (*benchHost, error) {
	return b.startHostWith(ctx, conns, host.Config{})
}

// startHostWith is startHost with cfg's settings (DataDir, Listen and
// Logger are the benchmark's).
func (b *bench) startHostWith(ctx context.Context, conns int, cfg host.Config) (*benchHost, error) {
	dir, err := os.MkdirTemp(b.dir, "host-")
	if err != nil {
		return nil, err
	}
	cfg.DataDir, cfg.Listen, cfg.Logger = dir, "127.0.0.1:0", quietLogger
	h, err := host.New(ctx, cfg)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	bh := &benchHost{h: h, dir: dir}
	if err := h.Start(); err != nil {
		bh.close()
		return nil, err
	}
	bh.c = newAPIClient(h.URL(), h.AdminToken(), conns)
	if bh.queue, err = bh.c.create(ctx, "q", formQueue, map[string]any{"messageRetentionSeconds": 1209600}); err != nil {
		bh.close()
		return nil, err
	}
	if bh.worker, err = bh.c.create(ctx, "w", formWorker, map[string]any{"handlers": []string{"fetch", "queue"}}); err != nil {
		bh.close()
		return nil, err
	}
	ver, err := bh.c.create(ctx, "v1", formVersion, map[string]any{
		"worker": ref{bh.worker}, "mainModule": "main.js",
		"modules":               []map[string]string{{"name": "main.js", "content": benchWorker}},
		"queueProducerBindings": []map[string]any{{"name": "Q", "resource": ref{bh.queue}}},
	})
	if err != nil {
		bh.close()
		return nil, err
	}
	if err := bh.c.update(ctx, bh.worker, map[string]any{"handlers": []string{"fetch", "queue"}, "version": ref{ver}}); err != nil {
		bh.close()
		return nil, err
	}
	return bh, nil
}

func (bh *benchHost) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bh.h.Shutdown(ctx)
	os.RemoveAll(bh.dir)
}

// fetch calls the worker's fetch route once.
func (bh *benchHost) fetch(ctx context.Context, path string) error {
	_, err := bh.c.do(ctx, "POST", fmt.Sprintf("/v2/spaces/%s/resources/%s/fetch/%s", benchSpace, bh.worker, path), nil)
	return err
}

// hostLayer: the producer Binding through the worker fetch route of a full
// host over HTTP on loopback; CPU-profiles the 100 B points.
func (b *bench) hostLayer(ctx context.Context) {
	s := b.prodSection("Producer throughput through the full host over HTTP (host, server, runtime/js, runtime/delivery)",
		fmt.Sprintf("host.New on a fresh data directory, listening on 127.0.0.1; a ModuleWorker whose fetch handler calls env.Q.sendBatch of 100 messages or env.Q.send of one, "+
			"driven through the worker fetch route (POST /v2/spaces/bench/resources/{worker}/fetch/batch or /one?size=N) by closed-loop HTTP clients in this process, %s per point. "+
			"Each call of the table is one fetch request. Ratio to engine: this layer's messages/s ÷ the Engine.Send point with the same mode and body. "+
			"CPU includes the HTTP load generator (same process).", b.pointDur), "engine")
	bh, err := b.startHost(ctx, 64)
	if err != nil {
		s.NotMeasured = "starting the host: " + err.Error()
		return
	}
	defer bh.close()
	for _, m := range prodModes {
		for _, size := range bodySizes {
			path := fmt.Sprintf("one?size=%d", size)
			if m.PerCall == 100 {
				path = fmt.Sprintf("batch?size=%d", size)
			}
			call := func(ctx context.Context, _ [][]byte) error { return bh.fetch(ctx, path) }
			// Warm up the worker's runtimes and connections.
			_ = call(ctx, nil)
			c := b.prog.phase(fmt.Sprintf("host %s %s", m.Name, bytesize(size)), "msgs")
			var pt prodPoint
			if size == 100 {
				var prof string
				var err error
				prof, err = b.profile(fmt.Sprintf("host-%d-%d", m.PerCall, size), func() {
					pt = runProducer(ctx, call, m, size, b.pointDur, c)
				})
				if err != nil {
					s.note("profile: %v", err)
				} else {
					b.profiles = append(b.profiles, profileRun{Name: fmt.Sprintf("host producer, %s, 100 B", m.Name), Path: prof, Section: s})
				}
			} else {
				pt = runProducer(ctx, call, m, size, b.pointDur, c)
			}
			b.prog.end()
			b.prodRow(s, "host", "engine", m, size, pt, "")
		}
	}
	s.note("Records per sync is not shown for the host: the host does not expose its store's counters.")
	s.note("Reading the JavaScript rows of the profiles: `js.(*fetchCall).request` is the host building the inbound Request (prelude.js); " +
		"`js.(*fetchCall).callHandler` is the worker's own fetch handler up to its first await (for sendBatch, the benchmark's worker building 100 message objects), run by goja; " +
		"`js.(*completion).settle` resumes the worker's code after an awaited send (here: the Response it returns); `js.(*fetchCall).finish` is the host reading that Response; " +
		"the producer Binding's argument checks are `js.(*instance).bindingObject.func*`.")
}
