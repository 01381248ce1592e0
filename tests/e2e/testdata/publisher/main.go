// Command publisher is an application that is not part of the host: it
// publishes one message to a queue through the Go client package (client/)
// and prints its ID. TestAGoProgramPublishes builds and runs it against
// the host binary.
//
//	publisher -host URL -token T -space S (-queue UID | -queue-name NAME) [-key K] [-print-uid] BODY
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/takoform/queuehost/client"
)

func main() {
	host := flag.String("host", "http://127.0.0.1:8787", "the host's base URL")
	token := flag.String("token", "", "bearer token")
	space := flag.String("space", "", "space")
	queue := flag.String("queue", "", "the queue's UID")
	name := flag.String("queue-name", "", "the queue's name (looked up; needs a token that may read queues)")
	key := flag.String("key", "", "Idempotency-Key")
	printUID := flag.Bool("print-uid", false, "print the queue's UID and publish nothing")
	flag.Parse()
	ctx := context.Background()
	c, err := client.New(*host, *token, *space)
	if err != nil {
		fail(err)
	}
	uid := *queue
	if *name != "" {
		if uid, err = c.QueueUID(ctx, *name); err != nil {
			fail(err)
		}
	}
	if *printUID {
		fmt.Println(uid)
		return
	}
	if flag.NArg() != 1 {
		fail(fmt.Errorf("one BODY argument"))
	}
	var opts []client.PublishOption
	if *key != "" {
		opts = append(opts, client.WithIdempotencyKey(*key))
	}
	id, err := c.Publish(ctx, uid, []byte(flag.Arg(0)), opts...)
	if err != nil {
		fail(err)
	}
	fmt.Println(id)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "publisher:", err)
	if code := client.Code(err); code != "" {
		fmt.Fprintln(os.Stderr, "code:", code)
	}
	os.Exit(1)
}
