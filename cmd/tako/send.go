package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
)

// sendWorker is the helper worker `tako send` goes through: the Host API
// has no route that sends to a queue (messages enter only through a
// worker's producer binding), so send creates, for the one send, a
// version of this worker whose SEND binding is the queue, selects it,
// calls its fetch handler with the body, and then unselects and deletes
// the version again, so that nothing it leaves binds the queue (a version
// that binds a queue blocks deleting it). The worker, without a version,
// stays. Two sends at once in the same space conflict
// (operation_in_progress); run them one after another.
const sendWorker = "tako-send"

// maxMessageBytes is the largest message body (spec/runtime-abi.md).
const maxMessageBytes = 127000

const sendModule = `export default {
  async fetch(request, env) {
    const delay = new URL(request.url).searchParams.get("delaySeconds");
    const opts = delay === null ? undefined : { delaySeconds: Number(delay) };
    const id = await env.SEND.send(await request.text(), opts);
    return new Response(String(id));
  },
};
`

func runSend(ctx context.Context, c *common, args []string, delay int, stdout io.Writer) error {
	if len(args) != 2 {
		return usageError{errors.New("send QUEUE BODY")}
	}
	queue, body := args[0], args[1]
	if body == "" {
		return usageError{errors.New("send: the body is empty (a message has 1..127000 bytes)")}
	}
	if len(body) > maxMessageBytes {
		return usageError{fmt.Errorf("send: the body is %d bytes, more than a message holds (127000); split it, or send a reference to where it is stored", len(body))}
	}
	cl, err := c.client(nil)
	if err != nil {
		return err
	}
	qs, err := cl.list(ctx, formQueue)
	if err != nil {
		return err
	}
	q, ok := qs[queue]
	if !ok {
		return &apiError{What: "send to queue " + queue, Status: 404, Code: "not_found", Detail: fmt.Sprintf("space %s has no queue named %q", cl.space, queue)}
	}
	workers, err := cl.list(ctx, formWorker)
	if err != nil {
		return err
	}
	w, ok := workers[sendWorker]
	wuid := w.Uid
	if !ok {
		if wuid, err = cl.create(ctx, "create the helper worker "+sendWorker, sendWorker, formWorker, map[string]any{"handlers": []string{"fetch"}}, nil); err != nil {
			return err
		}
	}
	sum := sha256.Sum256([]byte(q.Uid))
	vname := sendWorker + "-v" + hex.EncodeToString(sum[:])[:12]
	spec := map[string]any{
		"worker": map[string]any{"resourceUid": wuid}, "mainModule": "send.js",
		"modules":               []any{map[string]any{"name": "send.js", "content": sendModule}},
		"queueProducerBindings": []any{map[string]any{"name": "SEND", "resource": map[string]any{"resourceUid": q.Uid}}},
	}
	versions, err := cl.list(ctx, formVersion)
	if err != nil {
		return err
	}
	vuid := ""
	if v, ok := versions[vname]; ok {
		vuid = v.Uid
	} else if vuid, err = cl.create(ctx, "create the helper version "+vname, vname, formVersion, spec, nil); err != nil {
		return err
	}
	// Whatever happens next, leave nothing that binds the queue.
	defer func() {
		cctx := context.WithoutCancel(ctx)
		_ = cl.update(cctx, "unselect the helper version", wuid, map[string]any{"handlers": []string{"fetch"}}, nil)
		_ = cl.delete(cctx, "delete the helper version "+vname, vuid)
	}()
	if err := cl.update(ctx, "select the helper version "+vname, wuid, map[string]any{"handlers": []string{"fetch"}, "version": map[string]any{"resourceUid": vuid}}, nil); err != nil {
		return err
	}
	path := ""
	if delay >= 0 {
		path = fmt.Sprintf("?delaySeconds=%d", delay)
	}
	status, out, err := cl.fetch(ctx, wuid, path, body)
	if err != nil {
		return err
	}
	if status != 200 {
		return problemError("send to queue "+queue, status, nil, out)
	}
	fmt.Fprintf(stdout, "sent to queue %s: message %s\n", queue, strings.TrimSpace(string(out)))
	return nil
}
