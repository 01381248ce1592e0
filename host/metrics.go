package host

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/membudget"
	"github.com/takoform/queuehost/runtime/sandbox"
	"github.com/takoform/queuehost/runtime/store"
)

// metrics is the host's Prometheus registry. Queue figures are read from
// the engine when scraped (Engine.Counters), journal figures from the
// store's own counters, sandbox figures from the pool; only handler
// batches and HTTP requests are observed as they happen. Every label is
// bounded: a queue or consumer by its space and resource name, an HTTP
// request by its route pattern and status, never an ID or a path.
//
// Access: /metrics is not on the Host API's listener (it has no principal
// or grant to check there); it is served on Config.MetricsListen, off by
// default, which like the Host API belongs on loopback or a private
// network (cmd/takohost -metrics-listen 127.0.0.1:9187).
type metrics struct {
	h   *Host
	reg *prometheus.Registry

	batchDuration *prometheus.HistogramVec
	handlerFails  *prometheus.CounterVec
	httpRequests  *prometheus.CounterVec
	httpDuration  *prometheus.HistogramVec
	fsync         prometheus.Histogram // the journal's group commits (journal store only)

	mu     sync.Mutex
	labels map[string][2]string // resource UID -> space, name (never change)
}

func newMetrics(h *Host) *metrics {
	m := &metrics{h: h, reg: prometheus.NewRegistry(), labels: map[string][2]string{}}
	m.batchDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "takohost_consumer_batch_duration_seconds", Help: "Time a consumer's queue handler took per batch.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
	}, []string{"space", "consumer"})
	m.handlerFails = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "takohost_consumer_handler_failures_total", Help: "Batches whose queue handler threw, rejected or panicked.",
	}, []string{"space", "consumer"})
	m.httpRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "takohost_http_requests_total", Help: "Host API requests by route pattern and status code.",
	}, []string{"route", "code"})
	m.httpDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "takohost_http_request_duration_seconds", Help: "Host API request duration by route pattern.",
		Buckets: prometheus.DefBuckets,
	}, []string{"route"})
	m.fsync = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "takohost_journal_fsync_duration_seconds", Help: "Duration of each journal group commit's fsync.",
		Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16), // 50 µs .. 1.6 s
	})
	budget := func(f func(*membudget.Budget) int64) func() float64 {
		return func() float64 { return float64(f(h.budget)) }
	}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "takohost_body_budget_bytes", Help: "The host's budget of request and response bodies in flight (half of -max-memory)."}, budget(func(b *membudget.Budget) int64 { return b.Limits().Total })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "takohost_body_budget_used_bytes", Help: "Bytes of request and response bodies in flight now."}, budget((*membudget.Budget).Used)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "takohost_body_budget_peak_bytes", Help: "The most bytes of bodies in flight at once since the host started."}, budget((*membudget.Budget).Peak)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "takohost_body_budget_refused_total", Help: "Bodies refused (503, 413, a rejected fetch or send) because the budget or a share could not take them."}, budget((*membudget.Budget).Refused)),
	)
	m.reg.MustRegister(m.batchDuration, m.handlerFails, m.httpRequests, m.httpDuration, m.fsync,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), (*stateCollector)(m))
	return m
}

// handler serves the registry in the Prometheus text format.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// resource is the space and name of uid, cached: a UID never changes
// either. ok is false when the store no longer has it.
func (m *metrics) resource(uid string) (space, name string, ok bool) {
	m.mu.Lock()
	l, hit := m.labels[uid]
	m.mu.Unlock()
	if hit {
		return l[0], l[1], true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := m.h.st.Resource(ctx, uid)
	if err != nil {
		return "", "", false
	}
	m.mu.Lock()
	if len(m.labels) > 100000 { // a bound against endless churn
		m.labels = map[string][2]string{}
	}
	m.labels[uid] = [2]string{r.Space, r.Name}
	m.mu.Unlock()
	return r.Space, r.Name, true
}

func (m *metrics) observeBatch(o delivery.BatchObservation) {
	space, name, ok := m.resource(o.ConsumerUID)
	if !ok {
		return
	}
	m.batchDuration.WithLabelValues(space, name).Observe(o.Duration.Seconds())
	if o.Failed {
		m.handlerFails.WithLabelValues(space, name).Inc()
	} else {
		// Present from the first batch, so a rate of 0 reads as 0.
		m.handlerFails.WithLabelValues(space, name)
	}
}

func (m *metrics) observeRequest(route string, status int, d time.Duration) {
	m.httpRequests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	m.httpDuration.WithLabelValues(route).Observe(d.Seconds())
}

// stateCollector reads the engine, the journal and the sandboxes when
// scraped.
type stateCollector metrics

var (
	queueLabels = []string{"space", "queue"}
	queueDescs  = []struct {
		d    *prometheus.Desc
		kind prometheus.ValueType
		get  func(*delivery.QueueCounters) float64
	}{
		{prometheus.NewDesc("takohost_queue_messages_accepted_total", "Messages accepted by send since the host started.", queueLabels, nil), prometheus.CounterValue, func(c *delivery.QueueCounters) float64 { return float64(c.Accepted) }},
		{prometheus.NewDesc("takohost_queue_messages_delivered_total", "Message deliveries to a queue handler (each attempt).", queueLabels, nil), prometheus.CounterValue, func(c *delivery.QueueCounters) float64 { return float64(c.Delivered) }},
		{prometheus.NewDesc("takohost_queue_messages_acknowledged_total", "Messages acknowledged.", queueLabels, nil), prometheus.CounterValue, func(c *delivery.QueueCounters) float64 { return float64(c.Acknowledged) }},
		{prometheus.NewDesc("takohost_queue_messages_retried_total", "Messages scheduled for another delivery.", queueLabels, nil), prometheus.CounterValue, func(c *delivery.QueueCounters) float64 { return float64(c.Retried) }},
		{prometheus.NewDesc("takohost_queue_messages_dead_lettered_total", "Messages moved to the dead-letter queue after their last retry.", queueLabels, nil), prometheus.CounterValue, func(c *delivery.QueueCounters) float64 { return float64(c.DeadLettered) }},
		{prometheus.NewDesc("takohost_queue_messages_discarded_total", "Messages discarded after their last retry (no dead-letter queue).", queueLabels, nil), prometheus.CounterValue, func(c *delivery.QueueCounters) float64 { return float64(c.Discarded) }},
		{prometheus.NewDesc("takohost_queue_messages_expired_total", "Messages removed when their retention passed.", queueLabels, nil), prometheus.CounterValue, func(c *delivery.QueueCounters) float64 { return float64(c.Expired) }},
		{prometheus.NewDesc("takohost_queue_backlog_messages", "Messages the queue holds (not yet acknowledged or removed).", queueLabels, nil), prometheus.GaugeValue, func(c *delivery.QueueCounters) float64 { return float64(c.Backlog) }},
		{prometheus.NewDesc("takohost_queue_backlog_bytes", "Body bytes of the messages the queue holds.", queueLabels, nil), prometheus.GaugeValue, func(c *delivery.QueueCounters) float64 { return float64(c.BacklogBytes) }},
		{prometheus.NewDesc("takohost_queue_oldest_message_age_seconds", "Age of the oldest message the queue holds (0 when empty).", queueLabels, nil), prometheus.GaugeValue, func(c *delivery.QueueCounters) float64 { return c.OldestAge.Seconds() }},
		{prometheus.NewDesc("takohost_queue_inflight_batches", "Batches dispatched to the handler and not yet finished.", queueLabels, nil), prometheus.GaugeValue, func(c *delivery.QueueCounters) float64 { return float64(c.InFlightBatches) }},
	}
	journalCommits = prometheus.NewDesc("takohost_journal_group_commits_total", "Journal group commits (one write and one fsync each).", nil, nil)
	journalFrames  = prometheus.NewDesc("takohost_journal_frames_total", "Journal frames made durable.", nil, nil)
	journalSync    = prometheus.NewDesc("takohost_journal_fsync_seconds_total", "Time spent in fsync; divided by group commits, the mean fsync latency.", nil, nil)
	journalWrite   = prometheus.NewDesc("takohost_journal_write_seconds_total", "Time spent writing group commits.", nil, nil)
	journalBytes   = prometheus.NewDesc("takohost_journal_bytes", "Bytes of data in the journal's segments.", nil, nil)
	journalLive    = prometheus.NewDesc("takohost_journal_live_bytes", "Estimated bytes of journal records still needed.", nil, nil)
	journalSegs    = prometheus.NewDesc("takohost_journal_segments", "Journal segment files.", nil, nil)
	sandboxesLive  = prometheus.NewDesc("takohost_sandboxes", "Live worker sandbox processes.", nil, nil)
	logWriteErrors = prometheus.NewDesc("takohost_worker_log_write_errors_total", "Worker log lines a log file could not take (kept in memory only; see the host's data directory).", nil, nil)
	sandboxKills   = prometheus.NewDesc("takohost_sandbox_kills_total", "Sandboxes that ended other than by going idle, by reason: memory (over its limit), time (an invocation past its deadline), init, crash (exited on its own), shutdown.", []string{"reason"}, nil)
	sandboxContain = prometheus.NewDesc("takohost_sandbox_containment", "1 when the sandboxes get an operating-system containment layer on this machine, 0 when not (the host's log says why): seccomp (no_new_privs and the seccomp filter), cgroup_memory, cgroup_pids (a cgroup per sandbox with these caps), netns (a network namespace per sandbox).", []string{"layer"}, nil)
	sandboxCgFails = prometheus.NewDesc("takohost_sandbox_cgroup_failures_total", "Sandboxes the host could not put in a cgroup of their own although the machine allows it (they ran under the RSS watchdog alone).", nil, nil)
)

// sandboxEndReasons are the reasons takohost_sandbox_kills_total always
// shows (0 until one happens), so that a rate reads 0 rather than nothing.
var sandboxEndReasons = []string{sandbox.EndMemory, sandbox.EndTime, sandbox.EndInit, sandbox.EndCrash, sandbox.EndShutdown}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, q := range queueDescs {
		ch <- q.d
	}
	ch <- attemptsDesc
	ch <- causesDesc
	for _, d := range []*prometheus.Desc{journalCommits, journalFrames, journalSync, journalWrite, journalBytes, journalLive, journalSegs, sandboxesLive, sandboxKills, sandboxContain, sandboxCgFails, logWriteErrors} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	m := (*metrics)(c)
	h := m.h
	if h.eng != nil {
		for _, qc := range h.eng.Counters() {
			space, name, ok := m.resource(qc.UID)
			if !ok {
				continue
			}
			for _, q := range queueDescs {
				ch <- prometheus.MustNewConstMetric(q.d, q.kind, q.get(&qc), space, name)
			}
			collectForensics(ch, &qc, space, name)
		}
	}
	if j := journaled(h.st); j != nil {
		st := j.Stats()
		ch <- prometheus.MustNewConstMetric(journalCommits, prometheus.CounterValue, float64(st.Syncs))
		ch <- prometheus.MustNewConstMetric(journalFrames, prometheus.CounterValue, float64(st.Appends))
		ch <- prometheus.MustNewConstMetric(journalSync, prometheus.CounterValue, st.SyncTime.Seconds())
		ch <- prometheus.MustNewConstMetric(journalWrite, prometheus.CounterValue, st.WriteTime.Seconds())
		ch <- prometheus.MustNewConstMetric(journalBytes, prometheus.GaugeValue, float64(st.Bytes))
		ch <- prometheus.MustNewConstMetric(journalLive, prometheus.GaugeValue, float64(st.LiveBytes))
		ch <- prometheus.MustNewConstMetric(journalSegs, prometheus.GaugeValue, float64(st.Segments))
	}
	if h.logs != nil {
		ch <- prometheus.MustNewConstMetric(logWriteErrors, prometheus.CounterValue, float64(h.logs.WriteErrors()))
	}
	if sb, ok := h.rt.(sandboxRuntime); ok {
		ch <- prometheus.MustNewConstMetric(sandboxesLive, prometheus.GaugeValue, float64(sb.Pool.Stats()))
		ends := sb.Pool.Ends()
		for _, r := range sandboxEndReasons {
			ch <- prometheus.MustNewConstMetric(sandboxKills, prometheus.CounterValue, float64(ends[r]), r)
		}
		ct, cgFails := sb.Pool.Containment()
		for layer, on := range map[string]bool{"seccomp": ct.Seccomp, "cgroup_memory": ct.Cgroup != "", "cgroup_pids": ct.CgroupPids, "netns": ct.NetNS, "jail": ct.Jail, "unprivileged_uid": ct.Jail && ct.UID != 0} {
			v := 0.0
			if on {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(sandboxContain, prometheus.GaugeValue, v, layer)
		}
		ch <- prometheus.MustNewConstMetric(sandboxCgFails, prometheus.CounterValue, float64(cgFails))
	}
}

// journaled is the journal store under the host's store, if it is one.
func journaled(st store.Store) *store.Journaled {
	for {
		switch s := st.(type) {
		case *store.Journaled:
			return s
		case faultyStore:
			st = s.Store
		default:
			return nil
		}
	}
}

// MetricsHandler serves /metrics in the Prometheus text format (for
// in-process use; Config.MetricsListen serves it on its own address).
func (h *Host) MetricsHandler() http.Handler { return h.metrics.handler() }
