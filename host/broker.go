package host

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/takoform/queuehost/controller"
	"github.com/takoform/queuehost/runtime/broker"
	"github.com/takoform/queuehost/runtime/broker/rabbitmq"
	"github.com/takoform/queuehost/runtime/store"
)

// BrokerConfig is one message broker of the host (spec/peers.md
// §Brokers): an Offering of AtLeastOnceQueue named Name whose queues keep
// their messages on it. Brokers are host configuration, never part of a
// resource's spec.
type BrokerConfig struct {
	Name string
	// URL is amqp:// or amqps:// (RabbitMQ: user, password, host, port
	// and vhost as in the AMQP URI spec).
	URL string
	// PasswordFile or PasswordEnv give the password instead of the URL
	// (a mounted secret, an environment variable).
	PasswordFile, PasswordEnv string
	// CAFile is a PEM bundle of the CAs to trust for amqps:// (the
	// system roots when empty).
	CAFile string
	// Prefetch is each queue's consumer prefetch; 0 (unlimited) by
	// default: the host holds every message of its broker queues.
	Prefetch int
	// MinBackoff and MaxBackoff bound the reconnect backoff.
	MinBackoff, MaxBackoff time.Duration
}

var brokerName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

// ParseBroker reads the -broker flag's NAME=URL. The URL's query may carry
// the host's own options, which are taken out of it: prefetch=N,
// password_file=PATH, password_env=VAR, ca_file=PATH, min_backoff=DUR,
// max_backoff=DUR.
func ParseBroker(s string) (BrokerConfig, error) {
	name, raw, ok := strings.Cut(s, "=")
	if !ok || !brokerName.MatchString(name) {
		return BrokerConfig{}, fmt.Errorf("-broker %q: write NAME=URL, NAME in lower case letters, digits and '-' (it is the Offering queues name)", s)
	}
	if name == controller.OfferingEmbedded || name == controller.OfferingSerialized {
		return BrokerConfig{}, fmt.Errorf("-broker %s: %q is the name of a built-in Offering; pick another name", name, name)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") {
		return BrokerConfig{}, fmt.Errorf("-broker %s: the URL must be amqp:// or amqps:// (RabbitMQ), not %q", name, u.Redacted())
	}
	b := BrokerConfig{Name: name}
	q := u.Query()
	take := func(k string) string { v := q.Get(k); q.Del(k); return v }
	if v := take("prefetch"); v != "" {
		if b.Prefetch, err = strconv.Atoi(v); err != nil || b.Prefetch < 0 || b.Prefetch > 65535 {
			return BrokerConfig{}, fmt.Errorf("-broker %s: prefetch must be 0 (unlimited) to 65535, not %q", name, v)
		}
	}
	b.PasswordFile, b.PasswordEnv, b.CAFile = take("password_file"), take("password_env"), take("ca_file")
	for k, d := range map[string]*time.Duration{"min_backoff": &b.MinBackoff, "max_backoff": &b.MaxBackoff} {
		if v := take(k); v != "" {
			if *d, err = time.ParseDuration(v); err != nil || *d <= 0 {
				return BrokerConfig{}, fmt.Errorf("-broker %s: %s must be a positive duration such as 200ms, not %q", name, k, v)
			}
		}
	}
	u.RawQuery = q.Encode()
	b.URL = u.String()
	return b, nil
}

// openBrokers connects to every configured broker and wraps st so that
// their queues' messages live on them.
func openBrokers(ctx context.Context, cfg Config, st store.Store) (*broker.Store, error) {
	if cfg.ClusterActive {
		return nil, errors.New("brokers with -cluster-active are not supported: each host would consume a share of every broker queue (spec/peers.md §Brokers)")
	}
	drivers := map[string]broker.Driver{}
	closeAll := func() {
		for _, d := range drivers {
			_ = d.Close()
		}
	}
	for _, b := range cfg.Brokers {
		if _, dup := drivers[b.Name]; dup {
			closeAll()
			return nil, fmt.Errorf("broker %s is configured twice", b.Name)
		}
		rc, err := rabbitConfig(b)
		if err == nil {
			rc.Logger = cfg.Logger
			var d *rabbitmq.Driver
			if d, err = rabbitmq.Open(ctx, rc); err == nil {
				drivers[b.Name] = d
			}
		}
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("broker %s: %w", b.Name, err)
		}
	}
	if o := cfg.QueueOffering; o != "" && o != controller.OfferingEmbedded && o != controller.OfferingSerialized {
		if _, ok := drivers[o]; !ok {
			closeAll()
			return nil, fmt.Errorf("-queue-offering %s: no broker of that name (-broker %s=URL)", o, o)
		}
	}
	return broker.New(st, broker.Options{Drivers: drivers, Logger: cfg.Logger}), nil
}

func rabbitConfig(b BrokerConfig) (rabbitmq.Config, error) {
	rc := rabbitmq.Config{URL: b.URL, Prefetch: b.Prefetch, MinBackoff: b.MinBackoff, MaxBackoff: b.MaxBackoff}
	pw := ""
	switch {
	case b.PasswordFile != "":
		p, err := os.ReadFile(b.PasswordFile)
		if err != nil {
			return rc, fmt.Errorf("reading the password file: %w", err)
		}
		pw = strings.TrimRight(string(p), "\r\n")
	case b.PasswordEnv != "":
		v, ok := os.LookupEnv(b.PasswordEnv)
		if !ok {
			return rc, fmt.Errorf("the password variable %s is not set", b.PasswordEnv)
		}
		pw = v
	}
	if pw != "" {
		u, err := url.Parse(b.URL)
		if err != nil {
			return rc, err
		}
		u.User = url.UserPassword(u.User.Username(), pw)
		rc.URL = u.String()
	}
	if b.CAFile != "" {
		pem, err := os.ReadFile(b.CAFile)
		if err != nil {
			return rc, fmt.Errorf("reading the CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return rc, fmt.Errorf("the CA file %s holds no PEM certificate", b.CAFile)
		}
		rc.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return rc, nil
}

// queueForm is AtLeastOnceQueue with the host's broker Offerings.
func queueForm(cfg Config, bs *broker.Store) controller.QueueForm {
	f := controller.QueueForm{Default: cfg.QueueOffering}
	if bs != nil {
		f.Brokers = bs.Offerings()
	}
	return f
}
