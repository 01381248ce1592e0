package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/takoform/queuehost/client"
)

// Publish to a queue, then consume it over HTTP: lease, settle, extend.
func ExampleClient_Pull() {
	ctx := context.Background()
	c, err := client.New(hostURL, adminToken, "pull-example")
	if err != nil {
		panic(err)
	}
	jobs, err := c.CreateQueue(ctx, "jobs", client.QueueSpec{MessageRetentionSeconds: 3600})
	if err != nil {
		panic(err)
	}
	pc, err := c.CreatePullConsumer(ctx, "jobs-pull", jobs, client.PullConsumerSpec{MaxBatchSize: 10, MaxRetries: 3, VisibilityTimeoutSeconds: 30})
	if err != nil {
		panic(err)
	}
	if _, err := c.PublishBatch(ctx, jobs, []client.Message{client.Text("resize a.png"), client.Text("resize b.png")}); err != nil {
		panic(err)
	}
	lease, err := c.Pull(ctx, pc, client.PullOptions{MaxMessages: 10, Wait: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	for _, m := range lease.Messages {
		fmt.Printf("%s (delivery %d)\n", m.Body, m.Attempts)
	}
	// The work takes longer than expected: keep the messages hidden.
	if _, err := c.Extend(ctx, pc, lease.ID, time.Minute); err != nil {
		panic(err)
	}
	// The first is done, the second is tried again at once.
	err = c.Settle(ctx, pc, lease.ID, client.Settlement{
		Acknowledge: []string{lease.Messages[0].ID},
		Retry:       []client.Retry{{ID: lease.Messages[1].ID, HasDelay: true}},
	})
	if err != nil {
		panic(err)
	}
	again, err := c.Pull(ctx, pc, client.PullOptions{Wait: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s (delivery %d)\n", again.Messages[0].Body, again.Messages[0].Attempts)
	fmt.Println(c.Ack(ctx, pc, again.ID, again.Messages[0].ID))
	fmt.Println("settling twice:", client.Code(c.Ack(ctx, pc, again.ID, again.Messages[0].ID)))
	// Output:
	// resize a.png (delivery 1)
	// resize b.png (delivery 1)
	// resize b.png (delivery 2)
	// <nil>
	// settling twice: lease_settled
}

// A consumer token pulls its queue's messages and nothing else's; a lease
// that expired refuses its settlement and its messages come back.
func TestConsumerTokenAndExpiry(t *testing.T) {
	ctx := context.Background()
	c, err := client.New(hostURL, adminToken, "pull-token")
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.CreateQueue(ctx, "q", client.QueueSpec{MessageRetentionSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.CreateQueue(ctx, "other", client.QueueSpec{MessageRetentionSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := c.CreatePullConsumer(ctx, "pc", q, client.PullConsumerSpec{MaxBatchSize: 5, MaxRetries: 3, VisibilityTimeoutSeconds: 30})
	if err != nil {
		t.Fatal(err)
	}
	po, err := c.CreatePullConsumer(ctx, "po", other, client.PullConsumerSpec{MaxBatchSize: 5, MaxRetries: 3, VisibilityTimeoutSeconds: 30})
	if err != nil {
		t.Fatal(err)
	}
	created := admin(t, "POST", "/v2/principals", map[string]any{"name": "puller", "grants": []any{map[string]any{"space": "pull-token", "role": "consumer", "queues": []string{q}}}})
	tok, _ := created["token"].(string)
	app, err := client.New(hostURL, tok, "pull-token")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, q, []byte("m")); err != nil {
		t.Fatal(err)
	}
	l, err := app.Pull(ctx, pc, client.PullOptions{Visibility: time.Second, Wait: 5 * time.Second})
	if err != nil || len(l.Messages) != 1 {
		t.Fatalf("pull with a consumer token: %+v, %v", l, err)
	}
	if _, err := app.Pull(ctx, po, client.PullOptions{}); client.Code(err) != "forbidden" {
		t.Fatalf("pull of another queue's consumer: %v", err)
	}
	if _, err := app.Publish(ctx, q, []byte("x")); client.Code(err) != "forbidden" {
		t.Fatalf("publish with a consumer token: %v", err)
	}
	time.Sleep(1500 * time.Millisecond)
	if err := app.Ack(ctx, pc, l.ID, l.Messages[0].ID); client.Code(err) != "lease_expired" {
		t.Fatalf("ack after the lease expired: %v", err)
	}
	again, err := app.Pull(ctx, pc, client.PullOptions{Wait: 5 * time.Second})
	if err != nil || len(again.Messages) != 1 || again.Messages[0].ID != l.Messages[0].ID || again.Messages[0].Attempts != 2 {
		t.Fatalf("after expiry: %+v, %v", again, err)
	}
	if _, err := app.Pull(ctx, pc, client.PullOptions{Visibility: 1500 * time.Millisecond}); err == nil {
		t.Fatal("a visibility of a fraction of a second was sent")
	}
}
