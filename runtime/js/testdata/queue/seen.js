// seen reports an observation to the Go test through the worker's log.
export function seen(tag, value) {
  console.log("SEEN " + tag + " " + JSON.stringify(value));
}

export function errInfo(e) {
  return {
    ok: false,
    name: e && e.name,
    message: e && e.message,
    isError: e instanceof Error,
    isTypeError: e instanceof TypeError,
    isRangeError: e instanceof RangeError,
  };
}

export function bytesHex(b) {
  return Array.from(new Uint8Array(b), (x) => x.toString(16).padStart(2, "0")).join("");
}
