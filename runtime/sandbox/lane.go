package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Lanes: an invocation's own pipes.
//
// Why: a conn (protocol.go) carries every request of a sandbox over one
// pair of pipes, read on each side by one goroutine that hands each frame
// to the goroutine waiting for it. Every hand-over wakes a goroutine,
// usually on another thread, and on the project's 2-core virtual machines
// a wake-up costs more than the pipe: a 64-byte round trip between two Go
// processes measured 72 µs (83 µs of CPU) with a reading goroutine handing
// frames over on each side, and 28–35 µs when the goroutine that waits for
// a frame reads it itself. An invocation that sends is two round trips.
//
// So a sandbox also has Options.Lanes lanes: pairs of pipes, each used by
// one invocation at a time, from its request to its reply. On the host,
// the caller writes the invocation and reads the lane itself, performing
// the sandbox's sends and settlements as they come, on its own goroutine
// (an outbound fetch, slow by nature, or a request behind which more are
// already waiting, on a goroutine of its own). In the sandbox, a goroutine
// per lane reads the next invocation and runs it, and a goroutine that
// waits for the host's reply to a send reads the lane itself: whoever waits
// holds the lane's read token in turn (childLane.await), so no frame
// changes goroutines unless two wait at once. A send starts on the
// invocation's own goroutine, which runs its JavaScript, and that
// goroutine, while it has nothing else to run, reads the lane until the
// reply comes (childLane.idle, the js.Waiter): a send then wakes no
// goroutine in the sandbox but the one that runs the code awaiting it. A
// timer or another completion interrupts that read with a read deadline
// (only between frames: laneReader). An invocation that finds
// every lane of its sandbox busy, or the host's MaxLaneCalls running, goes
// over the conn, whose coalesced writes serve many invocations at once
// well.
//
// Lanes are non-blocking, on the poller, like the conn. A blocking read
// made the round trip faster still (18–20 µs), but each waiting invocation
// then held one of the host's scheduler processors until the runtime's
// monitor took it back, and single sends from 8 concurrent clients fell to
// less than half the throughput.
//
// What a crossing still costs is waking across CPUs. Through a full host,
// single sends from 8 clients (the bench's weakest isolation point) took
// about 96 µs more CPU per message sandboxed than in process (perf, 2
// vCPUs: 371 vs 275 µs), 70 µs of it in the scheduler's sleeps and
// wake-ups and the pipes' system calls on both sides; the JavaScript cost
// the same in either process. With the host and its sandbox confined to
// one CPU (taskset), sandboxed throughput was 86–105% of in-process in
// four runs, against 72–79% on two CPUs. Tried on that point without a
// clear gain: a sandbox GOMAXPROCS of 1, a short EEVDF slice for every
// thread, the connection instead of lanes, and writing a frame from within
// the armed read (one read system call fewer per wait). Worse: blocking
// reads on both sides (51–53%) and spinning on the pipe for 20–50 µs
// before parking (59–69%). Pinning the sandbox to one CPU gained about 4
// points there, but its one full run measured end to end at 79%, below
// the unpinned runs, a later series of three alternating runs showed no
// consistent gain, and a pinned sandbox stays on a CPU that a CPU-burning
// neighbour holds.
//
// How much is the CPUs' and how much the lanes': on two CPUs a message
// cost 370–470 µs of CPU sandboxed (host and sandbox together, seven
// runs) and 240–320 µs in process; confined to one CPU, 306 and 324 µs
// sandboxed, 238 and 274 µs in process. And no crossing finds its frame
// already there: per message the sandboxed host and sandbox make 8 more
// reads (a read that finds the pipe empty, then, after the wake-up, the
// one that reads the frame, at each of the 4 crossings), 4 more writes and
// 3 more epoll waits than the host in process. So a lane that handed
// frames over in shared memory would still wait and be woken 4 times per
// message; what it would save is the system calls, and cutting those by 2
// reads per invocation made no measurable difference. Also seen: while its
// sandbox runs the JavaScript, the host's scheduler goes wholly idle, and
// its next system call restarts the Go runtime's monitor thread polling
// every 20 µs (about 5,000 wake-ups a second sandboxed, 100 in process);
// a Go runtime patched not to restart it gained 1.7 points in an
// alternating probe, within the run-to-run noise.
//
// Where the difference goes (perf over 4 s of single sends from 8 clients
// in each mode, both processes, CPU µs per message): the JavaScript, the
// GC and the HTTP cost about the same either way; isolation adds about 27
// in the pipes' system calls, most of it the wake-up a write makes (a
// write that wakes the other side costs 5–7 µs on these machines, the
// read that finds the pipe empty 2–3), 30 in the two Go schedulers
// going idle and being woken, 15 in setting an invocation up and
// answering it on each side (contexts, timers, the request rebuilt from
// its frame) and 8 in encoding and decoding frames: spread over many
// small costs, none of which alone would close the gap. The whole cost
// shows with far less noise in BenchmarkInvocation's CPU per invocation
// (this process and its sandboxes): a fetch that sends costs 120–140 µs
// sandboxed and 63–82 µs in process, one at a time or from 8 goroutines.
// There a sandbox GOMAXPROCS of 1 takes about 10% off the sandboxed
// figure (one thread to wake rather than a second one spinning up to find
// nothing), but it caps a worker's JavaScript at one core and moved
// nothing measurable through the full host; nor did a lower scheduling
// priority for the sandboxes (nice 5), which was to let the journal's
// writer run as soon as its sync returns. Nor, later (BenchmarkInvocation's
// fetch-send-durable and the bench's isolation phase): a sync writer that
// waited 100 or 300 µs for more sends (both modes' syncs answered more
// sends; the sandboxed invocations cost no less), a collection forced
// before each of the phase's runs (its two hosts share one Go heap), or
// the guest kernel's halt polling raised from 0 to 200 µs.
//
// Frames on a lane: the host writes an invocation request and the replies
// to the sandbox's requests; the sandbox writes its requests (IDs of the
// lane's own, Inv naming the invocation), the invocation's log lines and
// its reply. A reply nobody waits for any more (its call gave up) is
// dropped.

// laneBufferSize is a lane's read buffer: a fetch or a send in one read.
const laneBufferSize = 16 << 10

// laneEnd is one side's ends of a lane: the pipe it reads and the pipe it
// writes.
type laneEnd struct {
	c  pipeConn
	rd *laneReader
	br *bufio.Reader // over rd

	wmu  sync.Mutex
	wbuf []byte
	segs [][]byte
}

func newLaneEnd(c pipeConn) *laneEnd {
	rd := &laneReader{c: c}
	return &laneEnd{c: c, rd: rd, br: bufio.NewReaderSize(rd, laneBufferSize)}
}

// laneReader reads a lane's pipe for its bufio.Reader. Only the sandbox's
// loop goroutine, waiting for its invocation's replies, can be interrupted
// (childLane.idle): elsewhere a read deadline set to interrupt it is
// ignored, and cleared, so that no frame is ever cut in two.
type laneReader struct {
	c             pipeConn
	interruptible bool // by its reader only
}

func (r *laneReader) Read(b []byte) (int, error) {
	for {
		n, err := r.c.Read(b)
		if n == 0 && !r.interruptible && errors.Is(err, os.ErrDeadlineExceeded) {
			r.clear()
			continue
		}
		return n, err
	}
}

// interrupt ends a read waiting on the pipe now, or the next one.
func (r *laneReader) interrupt() { _ = r.c.r.f.SetReadDeadline(longAgo) }

func (r *laneReader) clear() { _ = r.c.r.f.SetReadDeadline(time.Time{}) }

// longAgo is a read deadline that has passed.
var longAgo = time.Unix(1, 0)

// write sends one frame whole, its large bodies uncopied (frameSegments).
func (l *laneEnd) write(f *frame) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	segs, buf := frameSegments(l.wbuf, f, laneBufferSize, l.segs[:0])
	var err error
	for _, s := range segs {
		if _, err = l.c.Write(s); err != nil {
			break
		}
	}
	l.wbuf = buf
	if cap(buf) > laneBufferSize {
		l.wbuf = nil
	}
	clear(segs) // no body held until the next write
	l.segs = segs[:0]
	return err
}

// read reads the next frame (one reader at a time).
func (l *laneEnd) read() (*frame, error) {
	f := new(frame)
	if err := readFrame(l.br, f); err != nil {
		return nil, err
	}
	return f, nil
}

func (l *laneEnd) close() { l.c.Close() }

// hostLanes makes n lanes: the host's ends, and the sandbox's ends to pass
// to it (cmd.ExtraFiles, two per lane: the one it reads, then the one it
// writes), which the caller closes once the sandbox has started.
func hostLanes(n int) (host []*laneEnd, child []*os.File, err error) {
	for range n {
		toChildR, toChildW, err := newPipe()
		if err != nil {
			return nil, nil, closeLanes(host, child, err)
		}
		child = append(child, toChildR)
		fromChildR, fromChildW, err := newPipe()
		if err != nil {
			toChildW.Close()
			return nil, nil, closeLanes(host, child, err)
		}
		child = append(child, fromChildW)
		c, err := newPipeConn(fromChildR, toChildW)
		if err != nil {
			fromChildR.Close()
			toChildW.Close()
			return nil, nil, closeLanes(host, child, err)
		}
		host = append(host, newLaneEnd(c))
	}
	return host, child, nil
}

func closeLanes(host []*laneEnd, child []*os.File, err error) error {
	for _, l := range host {
		l.close()
	}
	for _, f := range child {
		f.Close()
	}
	return err
}

// laneFD is the sandbox's descriptor of lane i's pipe from the host; the
// one to the host follows it.
func laneFD(i int) int { return toHostFD + 1 + 2*i }

// errLaneEnded: a lane's pipe from the other side ended.
var errLaneEnded = errors.New("sandbox: the lane to the host ended")

// childLane is the sandbox's side of a lane.
type childLane struct {
	*laneEnd
	tok      chan struct{} // holds a value while no goroutine reads the lane
	requests chan *frame   // the next invocation, from whoever read it
	dead     chan struct{} // closed when reading the lane failed
	fail     sync.Once
	replies  replies // the calls waiting for the host's replies
	// idling: the goroutine holding tok is in idle, reading the lane
	// until it is interrupted.
	idling atomic.Bool
}

// openChildLane opens lane i from the descriptors the sandbox inherited.
func openChildLane(i int) (*childLane, error) {
	c, err := openPipeConn(laneFD(i), laneFD(i)+1, fmt.Sprintf("lane %d", i))
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	return newChildLane(newLaneEnd(c)), nil
}

func newChildLane(e *laneEnd) *childLane {
	l := &childLane{laneEnd: e, tok: make(chan struct{}, 1), requests: make(chan *frame, 1),
		dead: make(chan struct{})}
	l.tok <- struct{}{}
	return l
}

// next waits for the lane's next invocation (nil once the lane ended).
func (l *childLane) next() *frame { return l.await(l.requests, nil) }

// call sends a request to the host and waits for its reply, or for ctx.
func (l *childLane) call(ctx context.Context, f *frame) (*frame, error) {
	ch, err := l.replies.add(f)
	if err != nil {
		return nil, err
	}
	if err := l.write(f); err != nil {
		l.replies.forget(f.ID)
		return nil, fmt.Errorf("%w: %w", errLaneEnded, err)
	}
	if r := l.await(ch, ctx.Done()); r != nil {
		return r, nil
	}
	l.replies.forget(f.ID)
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	return nil, errLaneEnded
}

// start sends a request to the host and returns at once: fn is called
// with the reply, or the error that stopped it, by whoever reads the reply
// (idle, await), or now.
func (l *childLane) start(f *frame, fn func(*frame, error)) {
	err := l.replies.addFunc(f, func(r *frame) {
		if r == nil {
			fn(nil, errLaneEnded)
			return
		}
		fn(r, nil)
	})
	if err != nil {
		fn(nil, err)
		return
	}
	if err := l.write(f); err != nil && l.replies.forget(f.ID) {
		fn(nil, fmt.Errorf("%w: %w", errLaneEnded, err))
	}
}

// idle is the wait of an invocation's loop goroutine (js.Waiter) while
// requests it started wait for their replies: it returns when wake
// receives, done is closed, interrupt is called, or it has read one frame
// from the lane and passed it on, which is how the loop goroutine reads
// its own replies, with no other goroutine woken in between.
func (l *childLane) idle(done, wake <-chan struct{}) {
	select {
	case <-wake:
		return
	case <-done:
		return
	case <-l.dead:
		select {
		case <-wake:
		case <-done:
		}
		return
	case <-l.tok:
	}
	defer func() { l.tok <- struct{}{} }()
	// Whoever wakes the loop after this store sees it and interrupts the
	// read (wakeIdle); whoever did before is seen here.
	l.idling.Store(true)
	select {
	case <-wake:
		l.idling.Store(false)
		return
	case <-done:
		l.idling.Store(false)
		return
	default:
	}
	l.rd.interruptible = true
	_, err := l.br.Peek(1)
	l.rd.interruptible = false
	l.idling.Store(false)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		l.rd.clear()
		return
	}
	if err != nil {
		l.end()
		return
	}
	f, err := l.read()
	if err != nil {
		l.end()
		return
	}
	l.dispatch(f)
}

// wakeIdle interrupts idle's read, if one is under way.
func (l *childLane) wakeIdle() {
	if l.idling.Load() {
		l.rd.interrupt()
	}
}

// end marks the lane ended: reading it failed.
func (l *childLane) end() {
	l.fail.Do(func() {
		l.replies.close(errLaneEnded)
		close(l.dead)
	})
}

// await returns the frame sent on ch, reading the lane itself whenever no
// other goroutine is: nil when done is closed or the lane ended first.
func (l *childLane) await(ch chan *frame, done <-chan struct{}) *frame {
	for {
		select {
		case f := <-ch:
			return f
		default:
		}
		select {
		case f := <-ch:
			return f
		case <-done:
			return nil
		case <-l.dead:
			return nil
		case <-l.tok:
		}
		// This goroutine holds the token: it reads one frame and passes
		// it to whoever waits for it, then lets the token go.
		select {
		case f := <-ch:
			l.tok <- struct{}{}
			return f
		default:
		}
		f, err := l.read()
		if err != nil {
			l.end()
			l.tok <- struct{}{}
			return nil
		}
		l.dispatch(f)
		l.tok <- struct{}{}
	}
}

// dispatch passes a frame read from the host to its waiter: a reply to
// the call that asked (dropped when that call gave up), an invocation to
// the lane's goroutine.
func (l *childLane) dispatch(f *frame) {
	if f.Reply {
		l.replies.deliver(f)
		return
	}
	select {
	case l.requests <- f:
	default:
		// The host writes an invocation only after the previous one's
		// reply, which follows its taking from requests.
		fmt.Fprintln(os.Stderr, "sandbox: a second invocation on a busy lane")
		os.Exit(70)
	}
}
