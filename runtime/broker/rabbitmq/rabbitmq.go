// Package rabbitmq is the broker.Driver for RabbitMQ (AMQP 0-9-1, with
// github.com/rabbitmq/amqp091-go): each queue is a durable quorum queue;
// a publish waits for the publisher confirm; a consumer acknowledges
// manually, and an acknowledgement is followed by a synchronous method on
// the same channel, whose answer proves the broker processed it (AMQP
// 0-9-1 does not confirm acks). One connection carries everything: a
// channel in confirm mode for publishes, one channel per consumed queue
// (a delivery's tag is valid only on its channel) and short-lived
// channels for declarations, whose errors close the channel they ran on.
//
// The connection is re-established by itself with exponential backoff
// (Config.MinBackoff doubling to Config.MaxBackoff); meanwhile every
// operation fails at once with broker.ErrUnavailable, and each consumer is
// told Lost: the broker requeues what it had delivered and delivers it
// again on the new connection.
package rabbitmq

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/takoform/queuehost/runtime/broker"
	"github.com/takoform/queuehost/runtime/store"
)

// Config is one RabbitMQ broker of the host's configuration.
type Config struct {
	// URL is amqp://user:password@host:port/vhost (amqps:// for TLS).
	URL string
	// TLS is used for amqps:// URLs (nil: the system roots).
	TLS *tls.Config
	// Prefetch is each consumer's basic.qos prefetch count; 0 is
	// unlimited, the default: the host holds every message of its queues
	// (see spec/peers.md §Brokers).
	Prefetch int
	// MinBackoff and MaxBackoff bound the reconnect backoff (defaults
	// 100 ms and 10 s).
	MinBackoff, MaxBackoff time.Duration
	Logger                 *slog.Logger
}

// Header names of the envelope (broker.Envelope) on a message; the ID is
// the AMQP message-id property.
const (
	HeaderAcceptedAt  = "x-tako-accepted-at"
	HeaderVisibleAt   = "x-tako-visible-at"
	HeaderAttempts    = "x-tako-attempts"
	HeaderRev         = "x-tako-rev"
	HeaderDeadLetter  = "x-tako-dead-letter"
	HeaderTraceParent = "x-tako-traceparent"
	HeaderHistory     = "x-tako-history"
)

// Driver is a connection to one RabbitMQ broker.
type Driver struct {
	cfg Config
	log *slog.Logger

	mu        sync.Mutex
	conn      *amqp.Connection
	gen       uint64 // connection generation; handles of an older one are void
	pub       *amqp.Channel
	pubMu     sync.Mutex // one publish batch at a time on pub
	rets      chan amqp.Return
	consumers map[*consumer]bool
	up        chan struct{} // closed while connected
	closed    bool
	done      chan struct{}
	wg        sync.WaitGroup
}

type consumer struct {
	q    broker.Queue
	c    broker.Consumer
	ch   *amqp.Channel
	gen  uint64
	gone bool
	stop bool
}

type handle struct {
	gen uint64
	ch  *amqp.Channel
	tag uint64
}

var _ broker.Driver = (*Driver)(nil)

// Open connects to the broker. The first connection must succeed (a
// misconfigured broker stops the host at start); later losses are
// reconnected with backoff.
func Open(ctx context.Context, cfg Config) (*Driver, error) {
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 100 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	d := &Driver{cfg: cfg, log: cfg.Logger, consumers: map[*consumer]bool{}, done: make(chan struct{}), up: make(chan struct{})}
	conn, err := d.dial()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: connecting to %s: %w", redact(cfg.URL), err)
	}
	if err := d.connected(conn); err != nil {
		conn.Close()
		return nil, fmt.Errorf("rabbitmq: %w", err)
	}
	d.wg.Add(1)
	go d.watch(conn)
	return d, nil
}

func redact(u string) string {
	if p, err := amqp.ParseURI(u); err == nil {
		p.Password = ""
		return p.String()
	}
	return "the broker URL"
}

func (d *Driver) dial() (*amqp.Connection, error) {
	return amqp.DialConfig(d.cfg.URL, amqp.Config{Heartbeat: 10 * time.Second, TLSClientConfig: d.cfg.TLS, Properties: amqp.Table{"connection_name": "takohost"}})
}

// connected sets up a new connection: the publish channel, then every
// consumer.
func (d *Driver) connected(conn *amqp.Connection) error {
	pub, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := pub.Confirm(false); err != nil {
		return err
	}
	// Publish drains the returns: the library hands a return to this
	// channel before it processes the confirm that follows it, so after
	// the confirms every return of a batch is in it.
	rets := pub.NotifyReturn(make(chan amqp.Return, 4096))
	d.mu.Lock()
	d.conn, d.pub, d.rets = conn, pub, rets
	d.gen++
	cs := make([]*consumer, 0, len(d.consumers))
	for c := range d.consumers {
		cs = append(cs, c)
	}
	close(d.up)
	d.mu.Unlock()
	for _, c := range cs {
		d.startConsumer(c)
	}
	return nil
}

// watch waits for the connection to close and reconnects with backoff.
func (d *Driver) watch(conn *amqp.Connection) {
	defer d.wg.Done()
	for {
		closed := conn.NotifyClose(make(chan *amqp.Error, 1))
		select {
		case <-d.done:
			return
		case err := <-closed:
			d.mu.Lock()
			if d.closed {
				d.mu.Unlock()
				return
			}
			d.up = make(chan struct{})
			d.conn, d.pub = nil, nil
			d.gen++
			cs := make([]*consumer, 0, len(d.consumers))
			for c := range d.consumers {
				cs = append(cs, c)
			}
			d.mu.Unlock()
			d.log.Warn("rabbitmq: connection lost; reconnecting with backoff", "broker", redact(d.cfg.URL), "err", err)
			for _, c := range cs {
				c.c.Lost()
			}
		}
		wait := d.cfg.MinBackoff
		for {
			select {
			case <-d.done:
				return
			case <-time.After(wait):
			}
			c, err := d.dial()
			if err == nil {
				if err = d.connected(c); err == nil {
					d.log.Info("rabbitmq: reconnected", "broker", redact(d.cfg.URL))
					conn = c
					break
				}
				c.Close()
			}
			d.log.Warn("rabbitmq: reconnecting failed", "broker", redact(d.cfg.URL), "err", err, "retryIn", wait.String())
			wait = min(wait*2, d.cfg.MaxBackoff)
		}
	}
}

// current is the live connection, or ErrUnavailable.
func (d *Driver) current() (*amqp.Connection, uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, 0, fmt.Errorf("%w: the driver is closed", broker.ErrUnavailable)
	}
	if d.conn == nil || d.conn.IsClosed() {
		return nil, 0, fmt.Errorf("%w: the connection to %s is down (reconnecting)", broker.ErrUnavailable, redact(d.cfg.URL))
	}
	return d.conn, d.gen, nil
}

// withChannel runs f on a short-lived channel.
func (d *Driver) withChannel(f func(ch *amqp.Channel) error) error {
	conn, _, err := d.current()
	if err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("%w: %w", broker.ErrUnavailable, err)
	}
	defer ch.Close()
	return f(ch)
}

func (*Driver) Kind() string { return "rabbitmq" }

// quorum is the declaration of every queue: durable, replicated, and
// without a delivery limit (the host counts attempts; RabbitMQ's own
// count grows with every requeue, a host restart included).
var quorum = amqp.Table{"x-queue-type": "quorum"}

func (d *Driver) Declare(_ context.Context, q broker.Queue) error {
	return d.withChannel(func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(q.Name, true, false, false, false, quorum)
		return err
	})
}

func notFound(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.NotFound
}

func (d *Driver) Delete(_ context.Context, q broker.Queue) error {
	return d.withChannel(func(ch *amqp.Channel) error {
		_, err := ch.QueueDelete(q.Name, false, false, false)
		if notFound(err) {
			return nil
		}
		return err
	})
}

func (d *Driver) Purge(_ context.Context, q broker.Queue) (n int, err error) {
	err = d.withChannel(func(ch *amqp.Channel) error {
		n, err = ch.QueuePurge(q.Name, false)
		if notFound(err) {
			return fmt.Errorf("%w: %s", broker.ErrQueueGone, q.Name)
		}
		return err
	})
	return n, err
}

func (d *Driver) Stat(_ context.Context, q broker.Queue) (exists bool, ready int, err error) {
	err = d.withChannel(func(ch *amqp.Channel) error {
		st, err := ch.QueueDeclarePassive(q.Name, true, false, false, false, quorum)
		if notFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		exists, ready = true, st.Messages
		return nil
	})
	return exists, ready, err
}

func encode(e broker.Envelope) amqp.Publishing {
	h := amqp.Table{HeaderAcceptedAt: e.AcceptedAt, HeaderVisibleAt: e.VisibleAt, HeaderAttempts: int64(e.Attempts), HeaderRev: e.Rev}
	if e.DeadLetter != nil {
		b, _ := json.Marshal(e.DeadLetter)
		h[HeaderDeadLetter] = string(b)
	}
	if e.TraceParent != "" {
		h[HeaderTraceParent] = e.TraceParent
	}
	if len(e.History) > 0 {
		b, _ := json.Marshal(e.History)
		h[HeaderHistory] = string(b)
	}
	return amqp.Publishing{MessageId: e.ID, Headers: h, DeliveryMode: amqp.Persistent, Timestamp: time.UnixMilli(e.AcceptedAt), Body: e.Body}
}

func intHeader(t amqp.Table, k string) (int64, bool) {
	switch v := t[k].(type) {
	case int64:
		return v, true
	case int32:
		return int64(v), true
	case int16:
		return int64(v), true
	case int8:
		return int64(v), true
	case int:
		return int64(v), true
	}
	return 0, false
}

func decode(m amqp.Delivery) (broker.Envelope, bool) {
	acc, ok1 := intHeader(m.Headers, HeaderAcceptedAt)
	vis, ok2 := intHeader(m.Headers, HeaderVisibleAt)
	att, ok3 := intHeader(m.Headers, HeaderAttempts)
	rev, ok4 := intHeader(m.Headers, HeaderRev)
	if !ok1 || !ok2 || !ok3 || !ok4 || m.MessageId == "" || len(m.Body) == 0 {
		return broker.Envelope{ID: m.MessageId, Body: m.Body}, false
	}
	e := broker.Envelope{ID: m.MessageId, AcceptedAt: acc, VisibleAt: vis, Attempts: int(att), Rev: rev, Body: m.Body}
	e.TraceParent, _ = m.Headers[HeaderTraceParent].(string)
	if s, ok := m.Headers[HeaderHistory].(string); ok {
		var hist []store.Attempt
		if json.Unmarshal([]byte(s), &hist) == nil {
			e.History = hist
		}
	}
	if s, ok := m.Headers[HeaderDeadLetter].(string); ok {
		var dl store.DeadLetter
		if json.Unmarshal([]byte(s), &dl) == nil {
			e.DeadLetter = &dl
		}
	}
	return e, true
}

// Publish sends envs to q's queue (the default exchange, mandatory) and
// waits for every publisher confirm. A message the broker returns (no
// such queue) fails the publish with broker.ErrQueueGone.
func (d *Driver) Publish(ctx context.Context, q broker.Queue, envs []broker.Envelope) error {
	d.pubMu.Lock()
	defer d.pubMu.Unlock()
	d.mu.Lock()
	pub, rets := d.pub, d.rets
	d.mu.Unlock()
	drain(rets, nil)
	if pub == nil {
		return fmt.Errorf("%w: the connection to %s is down (reconnecting)", broker.ErrUnavailable, redact(d.cfg.URL))
	}
	confs := make([]*amqp.DeferredConfirmation, 0, len(envs))
	for _, e := range envs {
		c, err := pub.PublishWithDeferredConfirmWithContext(ctx, "", q.Name, true, false, encode(e))
		if err != nil {
			return fmt.Errorf("%w: %w", broker.ErrUnavailable, err)
		}
		confs = append(confs, c)
	}
	for _, c := range confs {
		ok, err := c.WaitContext(ctx)
		if err != nil {
			return fmt.Errorf("%w: waiting for the publisher confirm: %w", broker.ErrUnavailable, err)
		}
		if !ok {
			return fmt.Errorf("%w: the broker did not confirm a publish (nack or connection lost)", broker.ErrUnavailable)
		}
	}
	if drain(rets, envs) {
		return fmt.Errorf("%w: %s", broker.ErrQueueGone, q.Name)
	}
	return nil
}

// drain empties the returns channel and reports whether one of them is
// of a message of envs.
func drain(rets chan amqp.Return, envs []broker.Envelope) bool {
	hit := false
	for {
		select {
		case r := <-rets:
			for _, e := range envs {
				if e.ID == r.MessageId {
					hit = true
				}
			}
		default:
			return hit
		}
	}
}

func (d *Driver) Consume(q broker.Queue, c broker.Consumer) (func(), error) {
	cs := &consumer{q: q, c: c}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, fmt.Errorf("%w: the driver is closed", broker.ErrUnavailable)
	}
	d.consumers[cs] = true
	connected := d.conn != nil
	d.mu.Unlock()
	if connected {
		d.startConsumer(cs)
	}
	return func() {
		d.mu.Lock()
		delete(d.consumers, cs)
		cs.stop = true
		ch := cs.ch
		d.mu.Unlock()
		if ch != nil {
			ch.Close()
		}
	}, nil
}

// startConsumer opens cs's channel on the current connection and reads
// its deliveries until the channel closes.
func (d *Driver) startConsumer(cs *consumer) {
	conn, gen, err := d.current()
	if err != nil {
		return // the reconnect starts it
	}
	probe, err := conn.Channel()
	if err != nil {
		d.log.Warn("rabbitmq: opening a channel failed", "queue", cs.q.Name, "err", err)
		return
	}
	_, err = probe.QueueDeclarePassive(cs.q.Name, true, false, false, false, quorum)
	probe.Close()
	if notFound(err) {
		d.mu.Lock()
		cs.gone = true
		d.mu.Unlock()
		cs.c.Gone()
		return
	}
	if err != nil {
		d.log.Warn("rabbitmq: checking a queue failed", "queue", cs.q.Name, "err", err)
		return
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Qos(d.cfg.Prefetch, 0, false)
	}
	if err != nil {
		d.log.Warn("rabbitmq: opening a consumer channel failed", "queue", cs.q.Name, "err", err)
		return
	}
	dels, err := ch.Consume(cs.q.Name, "", false, false, false, false, nil)
	if err != nil {
		d.log.Warn("rabbitmq: consuming failed", "queue", cs.q.Name, "err", err)
		ch.Close()
		return
	}
	cancels := ch.NotifyCancel(make(chan string, 1))
	d.mu.Lock()
	if cs.stop {
		d.mu.Unlock()
		ch.Close()
		return
	}
	cs.ch, cs.gen = ch, gen
	d.mu.Unlock()
	go func() {
		for m := range dels {
			env, ok := decode(m)
			cs.c.Deliver(broker.Delivery{Envelope: env, Foreign: !ok, Handle: handle{gen: gen, ch: ch, tag: m.DeliveryTag}})
		}
		// The channel closed: by stop, by the connection (watch tells
		// Lost), by the broker cancelling the consumer (the queue was
		// deleted), or by a channel error such as consumer_timeout.
		select {
		case _, cancelled := <-cancels: // closed, not sent, when the channel just closed
			if !cancelled {
				break
			}
			d.mu.Lock()
			cs.gone = true
			d.mu.Unlock()
			cs.c.Gone()
			return
		default:
		}
		d.mu.Lock()
		again := !cs.stop && !d.closed && d.gen == gen && !conn.IsClosed()
		d.mu.Unlock()
		if again {
			cs.c.Lost()
			time.Sleep(d.cfg.MinBackoff)
			d.startConsumer(cs)
		}
	}()
}

// Ack acknowledges each handle on its channel, then waits for a
// synchronous method's answer on every channel it used: the broker
// processes a channel's methods in order, so the answer proves the acks
// were processed. A handle of an earlier connection is void (the broker
// requeued that copy): ErrUnavailable.
func (d *Driver) Ack(_ context.Context, _ broker.Queue, hs []any) error {
	chans := map[*amqp.Channel]bool{}
	var errs []error
	for _, x := range hs {
		h, ok := x.(handle)
		if !ok {
			return fmt.Errorf("rabbitmq: a handle of another driver: %T", x)
		}
		d.mu.Lock()
		cur := d.gen
		d.mu.Unlock()
		if h.gen != cur || h.ch.IsClosed() {
			errs = append(errs, fmt.Errorf("%w: the delivery's channel is gone; the broker delivers it again", broker.ErrUnavailable))
			continue
		}
		if err := h.ch.Ack(h.tag, false); err != nil {
			errs = append(errs, fmt.Errorf("%w: %w", broker.ErrUnavailable, err))
			continue
		}
		chans[h.ch] = true
	}
	for ch := range chans {
		if err := ch.Qos(d.cfg.Prefetch, 0, false); err != nil {
			errs = append(errs, fmt.Errorf("%w: confirming acknowledgements: %w", broker.ErrUnavailable, err))
		}
	}
	return errors.Join(errs...)
}

// Close closes the connection; consumers end.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	conn := d.conn
	close(d.done)
	d.mu.Unlock()
	var err error
	if conn != nil {
		err = conn.Close()
	}
	d.wg.Wait()
	if errors.Is(err, amqp.ErrClosed) {
		err = nil
	}
	return err
}

// LocalPort is the local TCP port of the current connection (0 while
// disconnected): what tells this connection apart in the broker's
// connection list (rabbitmqctl list_connections peer_port).
func (d *Driver) LocalPort() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn == nil {
		return 0
	}
	if a, ok := d.conn.LocalAddr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}
