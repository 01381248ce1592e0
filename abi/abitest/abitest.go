// Package abitest implements the abi interfaces for the tests and
// benchmarks of the layers above abi, as net/http/httptest does for
// net/http: a Sender and a Settler that accept everything at once, for
// measuring or exercising a runtime without a queue behind it.
package abitest

import (
	"context"

	"github.com/takoform/queuehost/abi"
)

// Sender accepts every send at once and answers the ID "id" for each
// message.
type Sender struct{}

// Send implements abi.Sender.
func (Sender) Send(_ context.Context, _, _, _ string, msgs []abi.OutgoingMessage) ([]string, error) {
	ids := make([]string, len(msgs))
	for i := range ids {
		ids[i] = "id"
	}
	return ids, nil
}

// Settler accepts every settlement at once.
type Settler struct{}

// Settle implements abi.Settler.
func (Settler) Settle(context.Context, string, abi.Settlement) error { return nil }
