package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/takoform/queuehost/abi"
)

// Whom a sandbox's end is charged to.
//
// A worker's invocations share its sandbox, so one that ends it (a poison
// message exhausting its memory, a stack overflow, a time limit) ends the
// others it was running too. The delivery engine has counted an attempt for
// every batch before its handler ran, and a handler error is a throw: were
// the end the error of every batch, each innocent message would be charged
// an attempt for its neighbour, and with maxRetries 1 and a dead-letter
// queue dead-lettered without ever finishing. So the pool charges an end
// only to the invocation that caused it, and runs the others again within
// the same delivery (the same attempt):
//
//   - the host knows the cause when it killed the sandbox for one
//     invocation's time limit: that one fails; the others are not charged;
//   - a sandbox that was running one invocation, and had run no other,
//     ended because of it;
//   - otherwise (the memory cap, a crash, a stack overflow with several
//     running, or with one running in a sandbox that ran others before,
//     whose module state may be what filled it) each is a suspect.
//
// A batch that is not charged (a suspect, or one beside a known cause)
// runs again at once, alone, in a fresh sandbox of its own, with the
// messages it had not settled: it completes there, or it ends that sandbox
// too and is then charged. A batch whose message has ended two sandboxes
// is quarantined: the next deliveries of that message run alone from the
// start, so that it never again takes its neighbours' sandbox down.
type blame uint8

const (
	blameCause   blame = iota + 1 // it ended the sandbox: charged
	blameOther                    // another invocation did, or the host stopped an idle one
	blameSuspect                  // several were running; nobody can tell yet
	blameHost                     // the host is shutting down: nobody's, nothing runs again
)

// endedError is the error of an invocation whose sandbox ended under it.
type endedError struct {
	err   error // wraps ErrSandboxEnded
	blame blame
}

func (e *endedError) Error() string { return e.err.Error() }
func (e *endedError) Unwrap() error { return e.err }

// SandboxEnded reports the end for the attempt history (abi.SandboxFailure).
func (e *endedError) SandboxEnded() bool { return true }

// maxQuarantine bounds the messages the pool remembers having ended
// sandboxes (one of them is forgotten to make room).
const maxQuarantine = 4096

// quarantine counts, per worker and message, the sandboxes a message's
// batches were charged with ending.
type quarantine struct {
	mu    sync.Mutex
	kills map[string]int
}

func quarantineKey(workerUID, messageID string) string { return workerUID + "\x00" + messageID }

// add counts n more sandboxes ended by each of msgs and returns the
// messages that have now ended two or more.
func (q *quarantine) add(workerUID string, msgs []abi.Message, n int) (quarantined []string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.kills == nil {
		q.kills = map[string]int{}
	}
	for _, m := range msgs {
		k := quarantineKey(workerUID, m.ID)
		if _, ok := q.kills[k]; !ok && len(q.kills) >= maxQuarantine {
			for old := range q.kills {
				delete(q.kills, old)
				break
			}
		}
		q.kills[k] += n
		if q.kills[k] >= 2 {
			quarantined = append(quarantined, m.ID)
		}
	}
	return quarantined
}

// has reports whether a message of msgs has ended two sandboxes or more.
func (q *quarantine) has(workerUID string, msgs []abi.Message) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range msgs {
		if q.kills[quarantineKey(workerUID, m.ID)] >= 2 {
			return true
		}
	}
	return false
}

// Quarantined reports whether messageID, delivered to workerUID, has ended
// two sandboxes (its batches run in a sandbox of their own).
func (p *Pool) Quarantined(workerUID, messageID string) bool {
	return p.quarantine.has(workerUID, []abi.Message{{ID: messageID}})
}

// runBatch runs b in the worker's sandbox and charges a sandbox's end only
// to the batch that caused it (see blame).
func (p *Pool) runBatch(ctx context.Context, v *abi.Version, b *abi.Batch) error {
	rec := &settleRecorder{b: b, settled: map[string]bool{}}
	if p.quarantine.has(v.WorkerUID, b.Messages) {
		return p.runAlone(ctx, v, rec, nil, 1, startBy(ctx))
	}
	first := &runSettler{rec: rec}
	f := queueFrame(first, b.Messages)
	f.StartBy = startBy(ctx)
	_, err := p.invoke(ctx, keyWorker+v.WorkerUID, v, f, 0)
	var ee *endedError
	if !errors.As(err, &ee) {
		return err
	}
	switch ee.blame {
	case blameCause:
		p.charge(v, b.Messages, 1, err)
		return err
	case blameHost:
		p.logs.Add(v.WorkerUID, v.UID, "error", "Uncaught (in sandbox) "+err.Error())
		return err
	}
	if ctx.Err() != nil {
		return err
	}
	kills := 1
	why := "another invocation ended it"
	if ee.blame == blameSuspect {
		// If this batch ends its own sandbox too, it ended the first.
		kills = 2
		why = "it was one of several running, or the sandbox had run others before"
	}
	p.logs.Add(v.WorkerUID, v.UID, "warn", fmt.Sprintf("batch %s: %v while it ran (%s); it runs again alone in a fresh sandbox, no attempt charged", b.ID, err, why))
	return p.runAlone(ctx, v, rec, first, kills, 0) // started already: no start-by
}

// runAlone runs the messages of rec's batch not yet settled in a fresh
// sandbox of their own, stopped after; a sandbox that ends under them is
// theirs (charged, kills counted toward the quarantine). prev, the run
// whose sandbox ended (nil: none), is closed first: its settlements in
// flight are waited for (one the host was making when the sandbox ended
// may still be made: its message must not run again) and later ones are
// refused. startByNs is the frame's StartBy (0 for a batch that has
// started already).
func (p *Pool) runAlone(ctx context.Context, v *abi.Version, rec *settleRecorder, prev *runSettler, kills int, startByNs int64) error {
	if prev != nil {
		prev.close()
	}
	rest := rec.unsettled()
	if len(rest) == 0 {
		return nil
	}
	key, pr, err := p.startAlone(ctx, v)
	if err != nil {
		return err
	}
	defer func() {
		pr.release()
		p.mu.Lock()
		if p.procs[key] == pr {
			delete(p.procs, key)
		}
		p.mu.Unlock()
		go pr.stop()
	}()
	f := queueFrame(&runSettler{rec: rec}, rest)
	f.StartBy = startByNs
	_, err = pr.invoke(ctx, v, f, p.deadline(ctx, 0))
	var ee *endedError
	if errors.As(err, &ee) && ee.blame != blameHost {
		p.charge(v, rest, kills, err)
	}
	return err
}

// aloneWait is how often a re-run looks for a free sandbox when
// MaxSandboxes are running invocations.
const aloneWait = 25 * time.Millisecond

// startAlone starts a sandbox of its own for a re-run of v's batch and
// counts the caller as using it. When MaxSandboxes are running
// invocations it waits for one to end, until ctx does: failing at once
// would charge the batch the attempt its re-run is to spare it.
func (p *Pool) startAlone(ctx context.Context, v *abi.Version) (string, *proc, error) {
	var tick *time.Ticker
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return "", nil, ErrClosed
		}
		p.aloneSeq++
		key := keyWorker + v.WorkerUID + "!alone-" + strconv.FormatUint(p.aloneSeq, 10)
		pr, err := p.startLocked(key)
		if err == nil {
			pr.users++
			pr.lastUsed = time.Now()
		}
		p.mu.Unlock()
		if !errors.Is(err, ErrTooManySandboxes) {
			return key, pr, err
		}
		if tick == nil {
			tick = time.NewTicker(aloneWait)
			defer tick.Stop()
		}
		select {
		case <-ctx.Done():
			return "", nil, fmt.Errorf("%w (waited for one to run the batch again alone until %w)", err, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// charge records that msgs' batch ended a sandbox (kills of them) and says
// so in the worker's log.
func (p *Pool) charge(v *abi.Version, msgs []abi.Message, kills int, err error) {
	p.logs.Add(v.WorkerUID, v.UID, "error", "Uncaught (in sandbox) "+err.Error()+"; the invocation failed and the next one gets a fresh sandbox")
	for _, id := range p.quarantine.add(v.WorkerUID, msgs, kills) {
		p.logs.Add(v.WorkerUID, v.UID, "warn", "message "+id+" has ended two sandboxes: its deliveries run in a sandbox of their own from now on")
	}
}

// queueFrame is the invocation of the worker's queue handler with msgs of
// the batch, settled through run.
func queueFrame(run *runSettler, msgs []abi.Message) *frame {
	b := abi.NewBatch(run.rec.b.ID, run.rec.b.Queue, msgs, run)
	return &frame{Op: opQueue, Batch: &batchMsg{ID: b.ID, Queue: b.Queue, Messages: msgs}, batch: b}
}

// runSettler is the settler of one run of a batch (the first, or the one
// again alone): its settlements go to the batch's recorder until close.
type runSettler struct {
	rec *settleRecorder

	mu     sync.RWMutex // held for reading by each settlement in flight
	closed bool
}

func (r *runSettler) Settle(ctx context.Context, batchID string, s abi.Settlement) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return abi.ErrUnknownBatch
	}
	return r.rec.Settle(ctx, batchID, s)
}

// close waits for the run's settlements in flight and refuses later ones.
func (r *runSettler) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
}

// settleRecorder passes a batch's settlements on and remembers which
// messages they settled, so that a batch run again gets only the others.
type settleRecorder struct {
	b *abi.Batch

	mu      sync.Mutex
	settled map[string]bool
	all     bool
}

func (r *settleRecorder) Settle(ctx context.Context, _ string, s abi.Settlement) error {
	var err error
	switch s.Kind {
	case abi.Acknowledge:
		err = r.b.Acknowledge(ctx, s.MessageID)
	case abi.Retry:
		err = r.b.Retry(ctx, s.MessageID, s.Delay)
	case abi.AcknowledgeAll:
		err = r.b.AcknowledgeAll(ctx)
	case abi.RetryAll:
		err = r.b.RetryAll(ctx, s.Delay)
	default:
		return fmt.Errorf("%w: unknown settlement", abi.ErrBackendUnavailable)
	}
	if err == nil || errors.Is(err, abi.ErrAlreadySettled) {
		r.mu.Lock()
		if s.Kind == abi.AcknowledgeAll || s.Kind == abi.RetryAll {
			r.all = true
		} else {
			r.settled[s.MessageID] = true
		}
		r.mu.Unlock()
	}
	return err
}

// unsettled lists the batch's messages no settlement has settled.
func (r *settleRecorder) unsettled() []abi.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.all {
		return nil
	}
	var out []abi.Message
	for _, m := range r.b.Messages {
		if !r.settled[m.ID] {
			out = append(out, m)
		}
	}
	return out
}
