package host

import (
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/takoform/queuehost/runtime/delivery"
)

// attemptHostID is the name of this host in the attempt history
// (store.Attempt.Host): its cluster ID when it has one, else its host
// name and listen address, which tell the hosts of one machine apart.
func attemptHostID(cfg Config) string {
	if cfg.HostID != "" {
		return cfg.HostID
	}
	name, err := os.Hostname()
	if err != nil || name == "" {
		name = "localhost"
	}
	if cfg.Listen != "" {
		return name + "/" + cfg.Listen
	}
	return name
}

// Attempt outcomes and dead letters by cause (spec/peers.md §Dead-letter
// groups), from the engine's counters when scraped. The cause label set is
// bounded by the engine (50 causes a queue, then "other").
var (
	attemptsDesc = prometheus.NewDesc("takohost_queue_attempts_total",
		"Message attempts that ended, by outcome (acknowledged, retried, thrown, time_limit, sandbox_ended).",
		[]string{"space", "queue", "outcome"}, nil)
	causesDesc = prometheus.NewDesc("takohost_queue_dead_lettered_by_cause_total",
		"Messages dead-lettered away from the queue, by cause: the fingerprint of their last attempt (the group of GET …/deadletters/groups) and its error name.",
		[]string{"space", "queue", "group", "error_name"}, nil)
)

func collectForensics(ch chan<- prometheus.Metric, qc *delivery.QueueCounters, space, name string) {
	for outcome, n := range qc.Outcomes {
		ch <- prometheus.MustNewConstMetric(attemptsDesc, prometheus.CounterValue, float64(n), space, name, outcome)
	}
	for _, c := range qc.DeadLetteredBy {
		ch <- prometheus.MustNewConstMetric(causesDesc, prometheus.CounterValue, float64(c.Count), space, name, c.Fingerprint, c.ErrorName)
	}
}
