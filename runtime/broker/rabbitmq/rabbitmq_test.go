package rabbitmq_test

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/runtime/broker"
	"github.com/takoform/queuehost/runtime/broker/brokertest"
	"github.com/takoform/queuehost/runtime/broker/rabbitmq"
)

// URL is the broker the tests use: $TAKOHOST_TEST_RABBITMQ, else the
// machine's RabbitMQ. Without one the tests skip, saying so, unless
// TAKOHOST_REQUIRE_RABBITMQ=1 (CI).
func URL(t *testing.T) string {
	u := os.Getenv("TAKOHOST_TEST_RABBITMQ")
	if u == "" {
		u = "amqp://guest:guest@127.0.0.1:5672/"
	}
	d, err := rabbitmq.Open(context.Background(), rabbitmq.Config{URL: u})
	if err != nil {
		if os.Getenv("TAKOHOST_REQUIRE_RABBITMQ") == "1" {
			t.Fatalf("RabbitMQ at %s: %v", u, err)
		}
		t.Skipf("no RabbitMQ at %s (TAKOHOST_TEST_RABBITMQ): %v", u, err)
	}
	d.Close()
	return u
}

func TestDriver(t *testing.T) {
	u := URL(t)
	brokertest.Run(t, brokertest.Harness{
		Open: func(t *testing.T) broker.Driver {
			d, err := rabbitmq.Open(context.Background(), rabbitmq.Config{URL: u, MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
		Drop: dropper(t),
	})
}

// dropper closes a driver's connection from the broker's side with
// rabbitmqctl close_connection, when rabbitmqctl can reach the broker.
func dropper(t *testing.T) func(*testing.T, broker.Driver) {
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		return nil
	}
	return func(t *testing.T, bd broker.Driver) {
		DropConnection(t, bd.(*rabbitmq.Driver).LocalPort())
	}
}

// DropConnection closes the connection whose client port is port.
func DropConnection(t *testing.T, port int) {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", "-q", "list_connections", "--no-table-headers", "pid", "peer_port").Output()
	if err != nil {
		t.Skipf("rabbitmqctl list_connections: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[1] == strconv.Itoa(port) {
			if out, err := exec.Command("rabbitmqctl", "-q", "close_connection", f[0], "test: connection drop").CombinedOutput(); err != nil {
				t.Fatalf("rabbitmqctl close_connection: %v: %s", err, out)
			}
			return
		}
	}
	t.Fatalf("no connection from port %d in %s", port, out)
}
