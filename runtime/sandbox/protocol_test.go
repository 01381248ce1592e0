package sandbox

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
)

// TestConnConcurrentCalls: many callers on each side at once (their frames
// coalesced into shared writes) each get the reply to their own request,
// whole, and a call after the peer is gone fails instead of hanging.
func TestConnConcurrentCalls(t *testing.T) {
	a, b := net.Pipe()
	ca, cb := newConn(a), newConn(b)
	echo := func(c *conn) func(*frame) {
		return func(f *frame) {
			go c.reply(f, &frame{QueueUID: "re:" + f.QueueUID, Messages: f.Messages})
		}
	}
	doneA := make(chan error, 1)
	doneB := make(chan error, 1)
	go func() { doneA <- ca.readLoop(echo(ca), func(err error) error { return err }) }()
	go func() { doneB <- cb.readLoop(echo(cb), func(err error) error { return err }) }()

	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for i := range 200 {
		for _, c := range []*conn{ca, cb} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				q := fmt.Sprintf("q%d", i)
				body := make([]byte, i*37)
				for j := range body {
					body[j] = byte(i + j)
				}
				r, err := c.call(context.Background(), &frame{Op: opSend, QueueUID: q, Messages: []wireOutgoing{{Body: body}}})
				switch {
				case err != nil:
					errs <- err
				case r.QueueUID != "re:"+q || len(r.Messages) != 1 || string(r.Messages[0].Body) != string(body):
					errs <- fmt.Errorf("call %s got the reply %q with %d messages", q, r.QueueUID, len(r.Messages))
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	b.Close()
	<-doneA
	<-doneB
	if _, err := ca.call(context.Background(), &frame{Op: opSend}); err == nil {
		t.Fatal("a call on a closed connection succeeded")
	}
}
