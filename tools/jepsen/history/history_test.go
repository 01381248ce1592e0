package history

import (
	"strings"
	"testing"
)

// h builds a history: events get sequence numbers in the order given.
type h struct{ evs []Event }

func (b *h) add(e Event) *h {
	e.Seq = len(b.evs) + 1
	b.evs = append(b.evs, e)
	return b
}

func (b *h) send(n int, id string) *h {
	b.add(Event{Kind: Send, Numbers: []int{n}})
	return b.add(Event{Kind: SendOK, Numbers: []int{n}, IDs: []string{id}})
}

func (b *h) deliver(q, batch, host string, ms ...Msg) *h {
	return b.add(Event{Kind: Deliver, Queue: q, Batch: batch, Host: host, Msgs: ms})
}

func (b *h) acked(q, batch string, ids ...string) *h {
	return b.add(Event{Kind: Settled, Queue: q, Batch: batch, Acked: ids})
}

func (b *h) fault(f, host string) *h { return b.add(Event{Kind: Fault, Fault: f, Host: host}) }

func m(n int, id string, attempts int, act string) Msg {
	return Msg{N: n, ID: id, Attempts: attempts, Act: act}
}

var cfg = Config{Queue: "work", DLQ: "dead", MaxRetries: 3, Drained: true}

// good is a history with every kind of legitimate behaviour: a retry, a
// throw then an acknowledge, a message dead-lettered after 1+maxRetries
// failed deliveries, an acknowledge whose report a kill cut (confirmed by
// the drained queues), a hidden attempt excused by a kill and two by
// database restarts (one of a send made during the outage).
func good() *h {
	b := &h{}
	b.send(1, "a").send(2, "b").send(3, "c").send(4, "d").send(5, "e")
	b.deliver("work", "b1", "h1", m(1, "a", 1, "ack"), m(2, "b", 1, "retry"))
	b.acked("work", "b1", "a")
	b.deliver("work", "b2", "h2", m(2, "b", 2, "ack"))
	b.acked("work", "b2", "b")
	for a := 1; a <= 4; a++ {
		b.deliver("work", "c"+string(rune('0'+a)), "h1", m(3, "c", a, "throw"))
	}
	b.deliver("dead", "x1", "h1", m(3, "dc", 1, "ack"))
	b.acked("dead", "x1", "dc")
	b.deliver("work", "d1", "h3", m(4, "d", 1, "ack"))
	b.fault(FaultKill, "h3")
	b.fault(FaultKill, "h1")
	b.deliver("work", "e1", "h2", m(5, "e", 2, "ack")) // attempt 1 died with h1
	b.acked("work", "e1", "e")
	b.send(6, "f")
	b.deliver("work", "f1", "h2", m(6, "f", 1, "retry"))
	b.fault(FaultPGStop, "")
	b.fault(FaultPGStart, "")
	b.deliver("work", "f3", "h1", m(6, "f", 3, "ack")) // attempt 2 in doubt across the restart
	b.acked("work", "f3", "f")
	b.fault(FaultPGStop, "")
	b.send(7, "g") // recorded after the stop, committed before the server went down
	b.fault(FaultPGStart, "")
	b.deliver("work", "g2", "h1", m(7, "g", 2, "ack"))
	b.acked("work", "g2", "g")
	return b
}

func TestGoodHistoryPasses(t *testing.T) {
	r := Check(good().evs, cfg)
	if r.Violations() != 0 {
		t.Fatalf("a good history failed:\n%s", r.Table())
	}
	if r.AcksResolved != 5 || r.DeadLettered != 1 || r.AckUnconfirmed != 1 || r.ExcusedHidden != 3 {
		t.Fatalf("figures:\n%s", r.Table())
	}
}

// Each bad history must fail with its class (and only the classes named).
func TestBadHistoriesFail(t *testing.T) {
	cases := []struct {
		name string
		b    *h
		cfg  Config
		want map[string]int
	}{
		{"never delivered", (&h{}).send(1, "a"), cfg, map[string]int{Lost: 1}},
		{"never delivered, queues not drained", (&h{}).send(1, "a"), Config{Queue: "work", DLQ: "dead", MaxRetries: 3}, map[string]int{Unsettled: 1}},
		{"retried then gone", (&h{}).send(1, "a").deliver("work", "b1", "h1", m(1, "a", 1, "retry")), cfg, map[string]int{Lost: 1}},
		{"discarded after attempts no handler ran (no dead-letter queue)",
			(&h{}).send(1, "a").deliver("work", "b1", "h1", m(1, "a", 1, "throw")),
			Config{Queue: "work", MaxRetries: 3, Drained: true}, map[string]int{Lost: 1}},
		{"delivered again after its acknowledge resolved (same attempts: defect 1)",
			(&h{}).send(1, "a").deliver("work", "b1", "h1", m(1, "a", 1, "ack")).acked("work", "b1", "a").
				deliver("work", "b2", "h1", m(1, "a", 1, "ack")).acked("work", "b2", "a"),
			cfg, map[string]int{AckedThenDeliver: 1, AttemptsRepeated: 1}},
		{"delivered again after its acknowledge resolved (higher attempts)",
			(&h{}).send(1, "a").deliver("work", "b1", "h1", m(1, "a", 1, "ack")).acked("work", "b1", "a").
				deliver("work", "b2", "h2", m(1, "a", 2, "ack")),
			cfg, map[string]int{AckedThenDeliver: 1}},
		{"stale batch after the acknowledge, its host never frozen (defect 2)",
			(&h{}).send(1, "a").deliver("work", "b1", "h1", m(1, "a", 1, "retry")).
				deliver("work", "b2", "h2", m(1, "a", 2, "ack")).acked("work", "b2", "a").
				deliver("work", "b3", "h1", m(1, "a", 1, "ack")),
			cfg, map[string]int{AckedThenDeliver: 1, AttemptsRepeated: 1}},
		{"twice in one batch",
			(&h{}).send(1, "a").deliver("work", "b1", "h1", m(1, "a", 1, "ack"), m(1, "a", 1, "ack")).acked("work", "b1", "a"),
			cfg, map[string]int{AttemptsRepeated: 1}},
		{"first handled with attempts 3, no fault (defect 4)",
			(&h{}).send(1, "a").deliver("work", "b1", "h1", m(1, "a", 3, "ack")).acked("work", "b1", "a"),
			cfg, map[string]int{AttemptsJump: 1}},
		{"attempts jump beyond what one database outage excuses, the send inside it",
			(&h{}).fault(FaultPGStop, "").send(1, "a").fault(FaultPGStart, "").
				deliver("work", "b2", "h2", m(1, "a", 3, "ack")).acked("work", "b2", "a"),
			cfg, map[string]int{AttemptsJump: 1}},
		{"attempts jump beyond what one database restart excuses",
			(&h{}).send(1, "a").deliver("work", "b1", "h1", m(1, "a", 1, "retry")).fault(FaultPGStop, "").fault(FaultPGStart, "").
				deliver("work", "b2", "h2", m(1, "a", 4, "ack")).acked("work", "b2", "a"),
			cfg, map[string]int{AttemptsJump: 1}},
		{"attempts jump beyond what one kill excuses",
			(&h{}).send(1, "a").deliver("work", "b1", "h1", m(1, "a", 1, "retry")).fault(FaultKill, "h1").
				deliver("work", "b2", "h2", m(1, "a", 4, "ack")).acked("work", "b2", "a"),
			cfg, map[string]int{AttemptsJump: 1}},
		{"dead-lettered after one handler run (defect 4 with a dead-letter queue)",
			(&h{}).send(1, "a").deliver("work", "b1", "h1", m(1, "a", 1, "throw")).
				deliver("dead", "x1", "h1", m(1, "z", 1, "ack")).acked("dead", "x1", "z"),
			cfg, map[string]int{AttemptsJump: 1}},
		{"over the limit",
			(&h{}).send(1, "a").deliver("work", "b1", "h1", m(1, "a", 1, "throw")).deliver("work", "b2", "h1", m(1, "a", 2, "throw")).
				deliver("work", "b3", "h1", m(1, "a", 3, "throw")).deliver("work", "b4", "h1", m(1, "a", 4, "throw")).
				deliver("work", "b5", "h1", m(1, "a", 5, "ack")).acked("work", "b5", "a"),
			cfg, map[string]int{OverLimit: 1}},
		{"its acknowledge rejected, then gone",
			(&h{}).send(1, "a").deliver("work", "b1", "h1", m(1, "a", 1, "ack")).
				add(Event{Kind: Settled, Queue: "work", Batch: "b1", Failed: []string{"a"}}),
			cfg, map[string]int{Lost: 1}},
		{"never sent",
			(&h{}).deliver("work", "b1", "h1", m(9, "q", 1, "ack")).acked("work", "b1", "q"),
			cfg, map[string]int{Unexpected: 1}},
		{"a body the harness did not write",
			(&h{}).deliver("work", "b1", "h1", m(-1, "q", 1, "ack")).acked("work", "b1", "q"),
			cfg, map[string]int{Unexpected: 1}},
		{"delivered under another ID",
			(&h{}).send(1, "a").deliver("work", "b1", "h1", m(1, "zz", 1, "ack")).acked("work", "b1", "zz"),
			cfg, map[string]int{Unexpected: 1, Lost: 1}},
		{"exhausted and never dead-lettered",
			func() *h {
				b := (&h{}).send(1, "a")
				for a := 1; a <= 4; a++ {
					b.deliver("work", "b"+string(rune('0'+a)), "h1", m(1, "a", a, "throw"))
				}
				return b
			}(), cfg, map[string]int{DLQMissing: 1}},
		{"dead-lettered twice",
			func() *h {
				b := (&h{}).send(1, "a")
				for a := 1; a <= 4; a++ {
					b.deliver("work", "b"+string(rune('0'+a)), "h1", m(1, "a", a, "throw"))
				}
				return b.deliver("dead", "x1", "h1", m(1, "z1", 1, "ack")).acked("dead", "x1", "z1").
					deliver("dead", "x2", "h1", m(1, "z2", 1, "ack")).acked("dead", "x2", "z2")
			}(), cfg, map[string]int{DLQDuplicate: 1}},
		{"dead-lettered although acknowledged",
			(&h{}).send(1, "a").deliver("work", "b1", "h1", m(1, "a", 1, "ack")).acked("work", "b1", "a").fault(FaultKill, "h1").
				fault(FaultKill, "h2").fault(FaultKill, "h3").
				deliver("dead", "x1", "h1", m(1, "z", 1, "ack")).acked("dead", "x1", "z"),
			cfg, map[string]int{DLQAfterAck: 1}},
		{"dead-letter message delivered again after its acknowledge",
			func() *h {
				b := (&h{}).send(1, "a")
				for a := 1; a <= 4; a++ {
					b.deliver("work", "b"+string(rune('0'+a)), "h1", m(1, "a", a, "throw"))
				}
				return b.deliver("dead", "x1", "h1", m(1, "z", 1, "ack")).acked("dead", "x1", "z").
					deliver("dead", "x2", "h2", m(1, "z", 2, "ack"))
			}(), cfg, map[string]int{AckedThenDeliver: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Check(c.b.evs, c.cfg)
			if r.Violations() == 0 {
				t.Fatalf("the history passed:\n%s", r.Table())
			}
			for _, class := range Classes {
				if r.Counts[class] != c.want[class] {
					t.Errorf("%s = %d, want %d", class, r.Counts[class], c.want[class])
				}
			}
			if t.Failed() {
				t.Log("\n" + r.Table())
			}
		})
	}
}

// A late report from a host frozen before the acknowledge resolved, of an
// earlier attempt, is set apart; the same report with no freeze fails.
func TestLateReportOfAFrozenHost(t *testing.T) {
	b := (&h{}).send(1, "a").fault(FaultFreeze, "h1").
		deliver("work", "b2", "h2", m(1, "a", 2, "ack")).acked("work", "b2", "a").
		fault(FaultResume, "h1").
		deliver("work", "b1", "h1", m(1, "a", 1, "ack"))
	r := Check(b.evs, cfg)
	if r.Violations() != 0 || r.LateFrozen != 1 {
		t.Fatalf("late report of a frozen host:\n%s", r.Table())
	}
	// Resumed only after the report: not excusable.
	b2 := (&h{}).send(1, "a").fault(FaultFreeze, "h1").
		deliver("work", "b2", "h2", m(1, "a", 2, "ack")).acked("work", "b2", "a").
		deliver("work", "b1", "h1", m(1, "a", 1, "ack")).fault(FaultResume, "h1")
	if r := Check(b2.evs, cfg); r.Counts[AckedThenDeliver] != 1 {
		t.Fatalf("not excusable:\n%s", r.Table())
	}
}

func TestTableNamesEveryClass(t *testing.T) {
	tab := Check(nil, cfg).Table()
	for _, c := range Classes {
		if !strings.Contains(tab, c) {
			t.Errorf("table lacks %s:\n%s", c, tab)
		}
	}
}

// A repeated announcement of one batch (the worker's retry of a report
// whose answer it lost) is one delivery.
func TestRepeatedReportIsOneDelivery(t *testing.T) {
	b := (&h{}).send(1, "a").deliver("work", "b1", "h1", m(1, "a", 1, "ack")).deliver("work", "b1", "h1", m(1, "a", 1, "ack")).acked("work", "b1", "a")
	if r := Check(b.evs, cfg); r.Violations() != 0 || r.Deliveries != 1 {
		t.Fatalf("repeated report:\n%s", r.Table())
	}
}
