// Command pullclient is an application that is not part of the host: it
// publishes to a queue and consumes it over HTTP through the Go client
// (package client), as tests/e2e's TestPullClientsInGoAndNode runs it
// beside a Node program doing the same through the TypeScript package.
//
//	pullclient publish PREFIX N   publish N messages PREFIX-1..PREFIX-N
//	pullclient drain LIMIT        lease and acknowledge up to LIMIT messages,
//	                              printing each body acknowledged, until a
//	                              lease comes back empty
//
// The host, token, space, queue and pull consumer come from TAKOHOST_URL,
// TAKOHOST_TOKEN, TAKOHOST_SPACE, QUEUE_UID and CONSUMER_UID.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/takoform/queuehost/client"
)

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "pullclient:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	c, err := client.New(os.Getenv("TAKOHOST_URL"), os.Getenv("TAKOHOST_TOKEN"), os.Getenv("TAKOHOST_SPACE"))
	if err != nil {
		return err
	}
	switch {
	case len(args) == 3 && args[0] == "publish":
		n, err := strconv.Atoi(args[2])
		if err != nil {
			return err
		}
		msgs := make([]client.Message, n)
		for i := range msgs {
			msgs[i] = client.Text(fmt.Sprintf("%s-%d", args[1], i+1))
		}
		_, err = c.PublishBatch(ctx, os.Getenv("QUEUE_UID"), msgs)
		return err
	case len(args) == 2 && args[0] == "drain":
		limit, err := strconv.Atoi(args[1])
		if err != nil {
			return err
		}
		pc := os.Getenv("CONSUMER_UID")
		for done := 0; done < limit; {
			l, err := c.Pull(ctx, pc, client.PullOptions{MaxMessages: min(3, limit-done), Wait: time.Second})
			if err != nil {
				return err
			}
			if len(l.Messages) == 0 {
				return nil
			}
			ids := make([]string, len(l.Messages))
			for i, m := range l.Messages {
				ids[i] = m.ID
			}
			if err := c.Ack(ctx, pc, l.ID, ids...); err != nil {
				return err
			}
			for _, m := range l.Messages {
				fmt.Printf("%s\n", m.Body)
			}
			done += len(l.Messages)
		}
		return nil
	}
	return fmt.Errorf("usage: pullclient publish PREFIX N | pullclient drain LIMIT")
}
