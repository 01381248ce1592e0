package host

import (
	"strings"
	"testing"
	"time"
)

// TestParseBroker: -broker NAME=URL, the host's options taken out of the
// URL's query, and one sentence for each bad input.
func TestParseBroker(t *testing.T) {
	b, err := ParseBroker("rmq=amqps://app@mq.example:5671/prod?prefetch=50&password_env=MQ_PASS&min_backoff=200ms&heartbeat=5")
	if err != nil {
		t.Fatal(err)
	}
	if b.Name != "rmq" || b.Prefetch != 50 || b.PasswordEnv != "MQ_PASS" || b.MinBackoff != 200*time.Millisecond || b.URL != "amqps://app@mq.example:5671/prod?heartbeat=5" {
		t.Fatalf("parsed %+v", b)
	}
	for in, want := range map[string]string{
		"rabbitmq":                      "write NAME=URL",
		"Rabbit=amqp://h/":              "write NAME=URL",
		"embedded=amqp://h/":            "built-in Offering",
		"serialized=amqp://h/":          "built-in Offering",
		"mq=http://h/":                  "amqp:// or amqps://",
		"mq=amqp://h/?prefetch=-1":      "prefetch must be",
		"mq=amqp://h/?prefetch=x":       "prefetch must be",
		"mq=amqp://h/?max_backoff=soon": "max_backoff must be",
		"mq=amqp://h/?min_backoff=-1s":  "min_backoff must be",
	} {
		if _, err := ParseBroker(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseBroker(%q) = %v, want an error saying %q", in, err, want)
		}
	}
	// A password from the environment goes into the URL the driver dials.
	t.Setenv("MQ_PASS", "s3cret")
	rc, err := rabbitConfig(b)
	if err != nil || rc.URL != "amqps://app:s3cret@mq.example:5671/prod?heartbeat=5" {
		t.Fatalf("rabbitConfig: %q, %v", rc.URL, err)
	}
	b.PasswordEnv = "MQ_UNSET_VARIABLE"
	if _, err := rabbitConfig(b); err == nil || !strings.Contains(err.Error(), "is not set") {
		t.Fatalf("an unset password variable: %v", err)
	}
}
