package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"

	"github.com/takoform/queuehost/gen/api"
)

// Change is one step of a plan: create, update, delete or unchanged.
type Change struct {
	Action string `json:"action"`
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	UID    string `json:"uid,omitempty"`
	Detail string `json:"detail,omitempty"`
	// prev is an update's spec before it, for a rollback.
	prev json.RawMessage
}

// Summary counts a plan's changes by action.
type Summary struct {
	Created   int `json:"created"`
	Updated   int `json:"updated"`
	Deleted   int `json:"deleted"`
	Unchanged int `json:"unchanged"`
}

// Result is what apply and delete print with --output json.
type Result struct {
	Space   string   `json:"space"`
	DryRun  bool     `json:"dryRun"`
	Changes []Change `json:"changes"`
	Summary Summary  `json:"summary"`
}

// planner runs a plan step by step, or only records it (dry run). Each
// step is printed as it happens, so a long apply shows its progress.
type planner struct {
	c   *client
	dry bool
	res *Result
	out io.Writer // progress lines; nil for none
	// tty: out is a terminal, so a step in progress shows as a line that
	// its result then overwrites; otherwise only the results are printed,
	// one plain line each.
	tty bool
	// undo is what this run created or updated, in order, for a rollback;
	// final is set once the run deletes what it replaced, after which a
	// rollback could not restore the space.
	undo  []Change
	final bool
}

// rollback undoes, newest first, what this run created (deleting it) and
// updated (restoring the spec it had), after the host refused a step
// (cause), so that a failed apply leaves the space as it found it. It
// answers the error to report: cause, and what the rollback did.
func (p *planner) rollback(ctx context.Context, cause error) error {
	if p.final {
		return cause
	}
	ctx = context.WithoutCancel(ctx)
	if p.out != nil {
		fmt.Fprintf(p.out, "apply failed; rolling back the %d changes it made\n", len(p.undo))
	}
	for i := len(p.undo) - 1; i >= 0; i-- {
		ch := p.undo[i]
		var err error
		var done string
		switch ch.Action {
		case "create":
			err = p.c.delete(ctx, "roll back: delete "+ch.Kind+" "+ch.Name, ch.UID)
			done = "- " + ch.Kind + " " + ch.Name + " deleted (rolled back)"
		case "update":
			var spec any
			_ = json.Unmarshal(ch.prev, &spec)
			err = p.c.update(ctx, "roll back: restore "+ch.Kind+" "+ch.Name, ch.UID, spec, nil)
			done = "~ " + ch.Kind + " " + ch.Name + " restored (rolled back)"
		}
		if err != nil {
			return fmt.Errorf("%w; rolling back failed too, so the space keeps %d of this apply's changes: %v", cause, i+1, err)
		}
		if p.out != nil {
			fmt.Fprintln(p.out, done)
		}
	}
	return fmt.Errorf("%w; apply rolled back the %d changes it had made, so the space is as it was", cause, len(p.undo))
}

const pendingUID = "(new)"

func (p *planner) step(ctx context.Context, ch Change, fn func(context.Context) (string, error)) (string, error) {
	if ch.Action != "unchanged" && !p.dry && fn != nil {
		if p.out != nil && p.tty {
			fmt.Fprintf(p.out, "… %s %s %s", ch.Action, ch.Kind, ch.Name)
		}
		uid, err := fn(ctx)
		if p.out != nil && p.tty {
			fmt.Fprint(p.out, "\r\033[K")
		}
		if err != nil {
			return "", err
		}
		if uid != "" {
			ch.UID = uid
		}
		if ch.Action == "create" || ch.Action == "update" && ch.prev != nil {
			p.undo = append(p.undo, ch)
		}
	} else if ch.Action == "create" {
		ch.UID = pendingUID
	}
	p.res.Changes = append(p.res.Changes, ch)
	switch ch.Action {
	case "create":
		p.res.Summary.Created++
	case "update":
		p.res.Summary.Updated++
	case "delete":
		p.res.Summary.Deleted++
	default:
		p.res.Summary.Unchanged++
	}
	if p.out != nil {
		fmt.Fprintln(p.out, formatChange(ch, p.dry))
	}
	return ch.UID, nil
}

func formatChange(ch Change, dry bool) string {
	sign := map[string]string{"create": "+", "update": "~", "delete": "-", "unchanged": "="}[ch.Action]
	verb := ch.Action
	if !dry {
		verb = map[string]string{"create": "created", "update": "updated", "delete": "deleted", "unchanged": "unchanged"}[ch.Action]
	}
	s := fmt.Sprintf("%s %s %s %s", sign, ch.Kind, ch.Name, verb)
	if ch.Detail != "" {
		s += " (" + ch.Detail + ")"
	}
	return s
}

// sameSpec compares a resource's spec with the one wanted, as JSON values.
func sameSpec(have json.RawMessage, want any) bool {
	var a, b any
	if json.Unmarshal(have, &a) != nil {
		return false
	}
	raw, _ := json.Marshal(want)
	_ = json.Unmarshal(raw, &b)
	return reflect.DeepEqual(a, b)
}

type state struct {
	queues, workers, versions, consumers map[string]api.Resource
}

func (c *client) state(ctx context.Context) (*state, error) {
	var s state
	var err error
	if s.queues, err = c.list(ctx, formQueue); err != nil {
		return nil, err
	}
	if s.workers, err = c.list(ctx, formWorker); err != nil {
		return nil, err
	}
	if s.versions, err = c.list(ctx, formVersion); err != nil {
		return nil, err
	}
	if s.consumers, err = c.list(ctx, formConsumer); err != nil {
		return nil, err
	}
	return &s, nil
}

func refUID(spec json.RawMessage, field string) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(spec, &m) != nil {
		return ""
	}
	var r api.Reference
	if json.Unmarshal(m[field], &r) != nil {
		return ""
	}
	return r.ResourceUid
}

// Apply makes the space match the manifest: queues, then each worker and
// its version (created only when its code, bindings, vars or secrets
// changed, then selected), then consumers, then the unselected versions
// apply created earlier are deleted. Resources the manifest does not name
// are left alone.
func Apply(ctx context.Context, c *client, m *Manifest, dry bool, out io.Writer, tty bool) (*Result, error) {
	p := &planner{c: c, dry: dry, res: &Result{Space: m.Space, DryRun: dry, Changes: []Change{}}, out: out, tty: tty}
	if err := preflight(m); err != nil {
		return p.res, usageError{fmt.Errorf("nothing was changed; the project has these problems:\n%w", err)}
	}
	st, err := c.state(ctx)
	if err != nil {
		return p.res, err
	}
	res, err := apply(ctx, c, m, p, st)
	if err != nil && !dry && len(p.undo) > 0 {
		err = p.rollback(ctx, err)
	}
	return res, err
}

func apply(ctx context.Context, c *client, m *Manifest, p *planner, st *state) (*Result, error) {
	var err error
	queueUID := map[string]string{}
	for _, q := range m.Queues {
		spec := queueSpec(q)
		have, ok := st.queues[q.Name]
		ch := Change{Kind: "queue", Name: q.Name, UID: have.Uid, prev: have.Spec}
		var fn func(context.Context) (string, error)
		switch {
		case !ok:
			ch.Action = "create"
			fn = func(ctx context.Context) (string, error) {
				return c.create(ctx, "create queue "+q.Name, q.Name, formQueue, spec, nil)
			}
		case !sameSpec(have.Spec, spec):
			ch.Action = "update"
			fn = func(ctx context.Context) (string, error) {
				return have.Uid, c.update(ctx, "update queue "+q.Name, have.Uid, spec, nil)
			}
		default:
			ch.Action = "unchanged"
		}
		if queueUID[q.Name], err = p.step(ctx, ch, fn); err != nil {
			return p.res, err
		}
	}

	workerUID := map[string]string{}
	var collect []Change
	for _, w := range m.Workers {
		have, ok := st.workers[w.Name]
		uid := have.Uid
		if !ok {
			spec := map[string]any{"handlers": w.Handlers}
			// The worker first, without a version: the version refers to it.
			if uid, err = p.step(ctx, Change{Action: "create", Kind: "worker", Name: w.Name}, func(ctx context.Context) (string, error) {
				return c.create(ctx, "create worker "+w.Name, w.Name, formWorker, spec, nil)
			}); err != nil {
				return p.res, err
			}
		}
		workerUID[w.Name] = uid
		b, err := m.buildVersion(w, uid, queueUID)
		if err != nil {
			return p.res, err
		}
		versionUID := ""
		if v, ok := st.versions[b.Name]; ok && refUID(v.Spec, "worker") == uid {
			versionUID = v.Uid
			if _, err := p.step(ctx, Change{Action: "unchanged", Kind: "worker version", Name: b.Name, UID: v.Uid}, nil); err != nil {
				return p.res, err
			}
		} else {
			if versionUID, err = p.step(ctx, Change{Action: "create", Kind: "worker version", Name: b.Name}, func(ctx context.Context) (string, error) {
				var priv any
				if b.Secrets != nil {
					priv = map[string]any{"secrets": b.Secrets}
				}
				return c.create(ctx, "create worker version "+b.Name+" of worker "+w.Name, b.Name, formVersion, b.Spec, priv)
			}); err != nil {
				return p.res, err
			}
		}
		want := map[string]any{"handlers": w.Handlers, "version": map[string]any{"resourceUid": versionUID}}
		ch := Change{Kind: "worker", Name: w.Name, UID: uid, Detail: "version " + b.Name, prev: have.Spec}
		if !ok {
			ch.prev, _ = json.Marshal(map[string]any{"handlers": w.Handlers})
		}
		var fn func(context.Context) (string, error)
		if !ok || !sameSpec(have.Spec, want) {
			ch.Action = "update"
			fn = func(ctx context.Context) (string, error) {
				return uid, c.update(ctx, "select version "+b.Name+" of worker "+w.Name, uid, want, nil)
			}
		} else {
			ch.Action = "unchanged"
		}
		if _, err := p.step(ctx, ch, fn); err != nil {
			return p.res, err
		}
		// The versions this tool created earlier for the worker, no
		// longer selected.
		if ok {
			for name, v := range st.versions {
				if name != b.Name && strings.HasPrefix(name, versionPrefix(w.Name)) && versionNameRE.MatchString(name) && refUID(v.Spec, "worker") == uid {
					collect = append(collect, Change{Action: "delete", Kind: "worker version", Name: name, UID: v.Uid, Detail: "no longer selected by worker " + w.Name})
				}
			}
		}
	}

	for _, cd := range m.Consumers {
		dlq := ""
		if cd.DeadLetterQueue != "" {
			dlq = queueUID[cd.DeadLetterQueue]
		}
		spec := consumerSpec(cd, queueUID[cd.Queue], workerUID[cd.Worker], dlq)
		have, ok := st.consumers[cd.Name]
		ch := Change{Kind: "consumer", Name: cd.Name, UID: have.Uid, Detail: cd.Queue + " -> " + cd.Worker, prev: have.Spec}
		var fn func(context.Context) (string, error)
		switch {
		case !ok:
			ch.Action = "create"
			fn = func(ctx context.Context) (string, error) {
				return c.create(ctx, "create consumer "+cd.Name, cd.Name, formConsumer, spec, nil)
			}
		case !sameSpec(have.Spec, spec):
			ch.Action = "update"
			fn = func(ctx context.Context) (string, error) {
				return have.Uid, c.update(ctx, "update consumer "+cd.Name, have.Uid, spec, nil)
			}
		default:
			ch.Action = "unchanged"
		}
		if _, err := p.step(ctx, ch, fn); err != nil {
			return p.res, err
		}
	}

	sort.Slice(collect, func(i, j int) bool { return collect[i].Name < collect[j].Name })
	// From here on the space holds the manifest; what follows removes what
	// it replaced, and cannot be rolled back.
	p.final = true
	for _, ch := range collect {
		if _, err := p.step(ctx, ch, func(ctx context.Context) (string, error) {
			return ch.UID, c.delete(ctx, "delete worker version "+ch.Name, ch.UID)
		}); err != nil {
			return p.res, err
		}
	}
	return p.res, nil
}

// Delete removes what the manifest names, in the order the Host API
// allows (nothing cascades): consumers, each worker's selection, its
// versions, the worker, then the queues.
func Delete(ctx context.Context, c *client, m *Manifest, dry bool, out io.Writer, tty bool) (*Result, error) {
	p := &planner{c: c, dry: dry, res: &Result{Space: m.Space, DryRun: dry, Changes: []Change{}}, out: out, tty: tty}
	st, err := c.state(ctx)
	if err != nil {
		return p.res, err
	}
	del := func(kind, name, uid string) error {
		_, err := p.step(ctx, Change{Action: "delete", Kind: kind, Name: name, UID: uid}, func(ctx context.Context) (string, error) {
			return uid, c.delete(ctx, "delete "+kind+" "+name, uid)
		})
		return err
	}
	for _, cd := range m.Consumers {
		if have, ok := st.consumers[cd.Name]; ok {
			if err := del("consumer", cd.Name, have.Uid); err != nil {
				return p.res, err
			}
		}
	}
	for _, w := range m.Workers {
		have, ok := st.workers[w.Name]
		if !ok {
			continue
		}
		if refUID(have.Spec, "version") != "" {
			spec := map[string]any{"handlers": w.Handlers}
			var cur map[string]any
			if json.Unmarshal(have.Spec, &cur) == nil && cur["handlers"] != nil {
				spec["handlers"] = cur["handlers"]
			}
			if _, err := p.step(ctx, Change{Action: "update", Kind: "worker", Name: w.Name, UID: have.Uid, Detail: "no version selected"}, func(ctx context.Context) (string, error) {
				return have.Uid, c.update(ctx, "unselect the version of worker "+w.Name, have.Uid, spec, nil)
			}); err != nil {
				return p.res, err
			}
		}
		var names []string
		for name, v := range st.versions {
			if refUID(v.Spec, "worker") == have.Uid {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		for _, name := range names {
			if err := del("worker version", name, st.versions[name].Uid); err != nil {
				return p.res, err
			}
		}
		if err := del("worker", w.Name, have.Uid); err != nil {
			return p.res, err
		}
	}
	for _, q := range m.Queues {
		if have, ok := st.queues[q.Name]; ok {
			if err := del("queue", q.Name, have.Uid); err != nil {
				return p.res, err
			}
		}
	}
	return p.res, nil
}
