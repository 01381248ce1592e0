package controller

import (
	"bytes"
	"context"
	"errors"
	"sync"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/runtime/store"
)

// ErrNoVersion: the worker selects no version (or it is gone).
var ErrNoVersion = errors.New("the worker has no selected version")

// Versions resolves a ModuleWorker to its selected WorkerVersion, as the
// delivery engine's Resolver and the fetch route need at call time, so that
// a change of the selection applies to the next invocation.
//
// Both records are read from the store every time, but decoding the
// version's spec and private inputs is not repeated: every field of a
// WorkerVersion is immutable, so a decoded version is kept by UID and
// reused for as long as the stored record has the ETag it was decoded
// from. The cache holds at most maxCachedVersions versions.
//
// A worker's spec is mutable, and decoding it (JSON) was most of what the
// fetch route's authorization and target lookup cost per request (about
// 3% of the host's CPU on a fetch that sends one message): the decoded
// spec is kept by worker UID with the exact bytes it was decoded from, and
// reused only while the stored spec is byte for byte the same.
type Versions struct {
	st store.Store

	mu      sync.Mutex
	m       map[string]cachedVersion
	workers map[string]cachedWorker
}

type cachedWorker struct {
	spec []byte
	sp   api.ModuleWorkerSpec
}

type cachedVersion struct {
	etag    string
	v       *abi.Version
	exports []string
}

const maxCachedVersions = 1024

// NewVersions resolves versions from st.
func NewVersions(st store.Store) *Versions {
	return &Versions{st: st, m: map[string]cachedVersion{}, workers: map[string]cachedWorker{}}
}

// workerSpec decodes a ModuleWorker's spec, or returns the one decoded from
// the same bytes before. The result is shared: callers must not change it.
func (vs *Versions) workerSpec(w store.Resource) (api.ModuleWorkerSpec, error) {
	vs.mu.Lock()
	c, ok := vs.workers[w.UID]
	vs.mu.Unlock()
	if ok && bytes.Equal(c.spec, w.Spec) {
		return c.sp, nil
	}
	sp, err := workerSpecOf(w) // refuses a resource that is not a ModuleWorker
	if err != nil {
		return sp, err
	}
	vs.mu.Lock()
	if len(vs.workers) >= maxCachedVersions {
		clear(vs.workers)
	}
	vs.workers[w.UID] = cachedWorker{spec: bytes.Clone(w.Spec), sp: sp}
	vs.mu.Unlock()
	return sp, nil
}

// Selected returns the version workerUID selects and the handlers its main
// module exports; ErrNoVersion when it selects none. The Version and the
// slice are shared: callers must not change them.
func (vs *Versions) Selected(ctx context.Context, workerUID string) (*abi.Version, []string, error) {
	w, err := vs.st.Resource(ctx, workerUID)
	if err != nil {
		return nil, nil, err
	}
	sp, err := vs.workerSpec(w)
	if err != nil {
		return nil, nil, err
	}
	return vs.of(ctx, sp)
}

// of is Selected for a worker whose spec the caller has already read.
func (vs *Versions) of(ctx context.Context, sp api.ModuleWorkerSpec) (*abi.Version, []string, error) {
	if sp.Version == nil {
		return nil, nil, ErrNoVersion
	}
	vr, err := vs.st.Resource(ctx, sp.Version.ResourceUid)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, ErrNoVersion
	}
	if err != nil {
		return nil, nil, err
	}
	vs.mu.Lock()
	c, ok := vs.m[vr.UID]
	vs.mu.Unlock()
	if ok && c.etag == vr.ETag {
		return c.v, c.exports, nil
	}
	v, err := VersionFromResource(vr)
	if err != nil {
		return nil, nil, err
	}
	c = cachedVersion{etag: vr.ETag, v: v, exports: vr.Exports}
	vs.mu.Lock()
	if len(vs.m) >= maxCachedVersions {
		clear(vs.m)
	}
	vs.m[vr.UID] = c
	vs.mu.Unlock()
	return c.v, c.exports, nil
}
