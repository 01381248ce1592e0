package model

import (
	"slices"
	"testing"
)

const t0 = int64(1_900_000_000_000)

func ids(b *Batch) []string {
	var out []string
	for _, d := range b.Messages {
		out = append(out, d.ID)
	}
	return out
}

func intp(v int) *int { return &v }

// The model as an oracle: a message retried after its last delivery moves
// to the dead-letter queue as a new message with the DLQ's own delay.
func TestRetriesThenDeadLetter(t *testing.T) {
	m := New(t0, QueueConfig{MessageRetentionSeconds: 3600}, QueueConfig{DeliveryDelaySeconds: 7, MessageRetentionSeconds: 3600},
		ConsumerConfig{MaxBatchSize: 10, MaxConcurrency: 1, MaxRetries: 1, RetryDelaySeconds: 5, DeadLetter: true})
	sent, code := m.Send([]Outgoing{{Body: "a"}})
	if code != OK {
		t.Fatal(code)
	}
	b := m.TakeStarted()
	if len(b) != 1 || b[0].Messages[0].Attempts != 1 {
		t.Fatalf("first delivery %+v", b)
	}
	m.AdvanceTo(t0 + 2000)
	if got := m.Retry(b[0].ID, sent[0], nil); got != OK {
		t.Fatal(got)
	}
	if msg, _ := m.Message(Main, sent[0]); msg.VisibleAt != t0+2000+5000 {
		t.Fatalf("retry delay counted from %d, want from the call", msg.VisibleAt-5000-t0)
	}
	m.Return(b[0].ID, false) // frees the one concurrency slot
	m.AdvanceTo(t0 + 7000)
	b = m.TakeStarted()
	if len(b) != 1 || b[0].Messages[0].Attempts != 2 {
		t.Fatalf("second delivery %+v", b)
	}
	m.Return(b[0].ID, true) // throws: its deliveries are used up
	if m.Count(Main) != 0 || m.Count(DLQ) != 1 || m.Counts(Main).DeadLettered != 1 {
		t.Fatalf("after the last retry: main %d, dlq %d, %+v", m.Count(Main), m.Count(DLQ), m.Counts(Main))
	}
	dl := m.Messages(DLQ)[0]
	if dl.ID == sent[0] || dl.AcceptedAt != t0+7000 || dl.VisibleAt != t0+14000 || dl.Attempts != 0 || dl.DeadLetter.SourceID != sent[0] {
		t.Fatalf("dead-lettered %+v", dl)
	}
}

// Settlement: the first settlement wins, IDs outside the batch and ended
// batches are refused.
func TestSettlementCodes(t *testing.T) {
	m := New(t0, QueueConfig{MessageRetentionSeconds: 3600}, QueueConfig{MessageRetentionSeconds: 3600},
		ConsumerConfig{MaxBatchSize: 10, MaxConcurrency: 1, MaxRetries: 3})
	sent, _ := m.Send([]Outgoing{{Body: "a"}, {Body: "b"}})
	b := m.TakeStarted()[0]
	if !slices.Equal(ids(b), sent) {
		t.Fatalf("batch %v, want %v", ids(b), sent)
	}
	for _, c := range []struct{ got, want string }{
		{m.Acknowledge(b.ID, sent[0]), OK},
		{m.Retry(b.ID, sent[0], intp(3)), AlreadySettled},
		{m.Acknowledge(b.ID, "nope"), UnknownMessage},
	} {
		if c.got != c.want {
			t.Fatalf("got %q, want %q", c.got, c.want)
		}
	}
	m.Return(b.ID, false) // acknowledges sent[1]
	if got := m.AcknowledgeAll(b.ID); got != UnknownBatch {
		t.Fatalf("after the handler returned: %q", got)
	}
	if m.Count(Main) != 0 {
		t.Fatalf("%d left", m.Count(Main))
	}
}

// Retention counts from the accept time, delivered or not, boundary
// included; a message in a running batch is removed when it comes back.
func TestRetention(t *testing.T) {
	m := New(t0, QueueConfig{MessageRetentionSeconds: 60}, QueueConfig{MessageRetentionSeconds: 60},
		ConsumerConfig{MaxBatchSize: 1, MaxConcurrency: 1, MaxRetries: 5})
	sent, _ := m.Send([]Outgoing{{Body: "held"}, {Body: "waiting", Delay: intp(0)}})
	b := m.TakeStarted()[0]
	m.AdvanceTo(t0 + 60_000)
	if m.Count(Main) != 1 || m.Counts(Main).Expired != 1 {
		t.Fatalf("at the deadline: %d held, %+v", m.Count(Main), m.Counts(Main))
	}
	if len(m.Messages(Main)) != 0 {
		t.Fatal("a message found expired in a batch is still listed")
	}
	if got := m.Retry(b.ID, sent[0], nil); got != OK {
		t.Fatal(got)
	}
	if m.Count(Main) != 0 || m.Counts(Main).Expired != 2 || len(m.TakeStarted()) != 0 {
		t.Fatalf("after the retry: %d held, %+v", m.Count(Main), m.Counts(Main))
	}
}

// A checker accepts a batch only if the Forms allow it.
func TestCheckerRefusesAnEarlyPartialBatch(t *testing.T) {
	m := New(t0, QueueConfig{MessageRetentionSeconds: 3600}, QueueConfig{MessageRetentionSeconds: 3600},
		ConsumerConfig{MaxBatchSize: 2, MaxBatchTimeoutSeconds: 5, MaxConcurrency: 1, MaxRetries: 1})
	m.SetManual(true)
	sent, _ := m.Send([]Outgoing{{Body: "a"}})
	if m.Due() {
		t.Fatal("a lone message is due before its fill timeout")
	}
	if _, err := m.StartBatch(sent, nil); err == nil {
		t.Fatal("an early partial batch was accepted")
	}
	m.AdvanceTo(t0 + 5000)
	if !m.Due() {
		t.Fatal("not due at the fill timeout")
	}
	if _, err := m.StartBatch(sent, nil); err != nil {
		t.Fatal(err)
	}
}
