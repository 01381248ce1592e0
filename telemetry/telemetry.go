package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/delivery"
)

// Config says where spans go.
type Config struct {
	// Endpoint is the OTLP/HTTP collector's base URL
	// (http://127.0.0.1:4318; spans are posted to its /v1/traces) or the
	// full URL of its traces path. Empty: the OTEL_EXPORTER_OTLP_*
	// environment variables decide, and without them tracing is off.
	Endpoint string
	// ServiceName is the service.name resource attribute; "takohost"
	// when empty (OTEL_SERVICE_NAME wins over both).
	ServiceName string
	// BatchTimeout is how long spans wait to be exported together (5 s,
	// the SDK's default, when zero).
	BatchTimeout time.Duration
	// ViewURL is where the operator's trace backend shows a trace, with
	// {traceId} standing for its ID (Jaeger:
	// http://127.0.0.1:16686/trace/{traceId}); the Host API's message
	// listing links each traced message to it. Empty: IDs only.
	ViewURL string
}

// Environment variables that turn tracing on without a flag: the OTel
// SDK's own, read by the exporter.
const (
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envDisabled       = "OTEL_SDK_DISABLED"
)

// Enabled reports whether cfg, with the environment, turns tracing on.
func Enabled(cfg Config) bool {
	if strings.EqualFold(os.Getenv(envDisabled), "true") {
		return false
	}
	return cfg.Endpoint != "" || os.Getenv(EnvEndpoint) != "" || os.Getenv(EnvTracesEndpoint) != ""
}

// Tracing is the host's tracer, exporting over OTLP. Its methods are safe
// for concurrent use.
type Tracing struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
}

// Check reports what is wrong with cfg and the environment, as one
// sentence naming the setting: an endpoint that is not an http(s) URL, a
// protocol other than OTLP/HTTP's. Tracing that is off is never wrong.
func Check(cfg Config) error {
	if cfg.ViewURL != "" {
		u, err := url.Parse(strings.ReplaceAll(cfg.ViewURL, "{traceId}", "0af7651916cd43dd8448eb211c80319c"))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || !strings.Contains(cfg.ViewURL, "{traceId}") {
			return fmt.Errorf("trace URL %q: give an http(s) URL with {traceId} where the trace's ID goes, like http://127.0.0.1:16686/trace/{traceId}", cfg.ViewURL)
		}
		if !Enabled(cfg) {
			return fmt.Errorf("trace URL %q: the host traces nothing to link to; give -otlp-endpoint too (or OTEL_EXPORTER_OTLP_ENDPOINT)", cfg.ViewURL)
		}
	}
	_, err := exporterOptions(cfg)
	return err
}

// exporterOptions are the exporter's options for cfg.
func exporterOptions(cfg Config) ([]otlptracehttp.Option, error) {
	if !Enabled(cfg) {
		return nil, nil
	}
	for _, v := range []string{envTracesProtocol, envProtocol} {
		if p := os.Getenv(v); p != "" {
			if p != "http/protobuf" {
				return nil, fmt.Errorf("%s=%q: the host exports traces over OTLP/HTTP only; set it to http/protobuf (a collector's port 4318) or unset it", v, p)
			}
			break
		}
	}
	if cfg.Endpoint == "" {
		return nil, nil
	}
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("OTLP endpoint %q: give the collector's http(s) URL, like http://127.0.0.1:4318", cfg.Endpoint)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return []otlptracehttp.Option{otlptracehttp.WithEndpointURL(u.String())}, nil
}

// New starts tracing as cfg and the environment say. It returns nil, nil
// when tracing is off (Enabled false); a bad endpoint or protocol is an
// error naming it (Check).
func New(ctx context.Context, cfg Config) (*Tracing, error) {
	if !Enabled(cfg) {
		return nil, nil
	}
	opts, err := exporterOptions(cfg)
	if err != nil {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	name := cfg.ServiceName
	if name == "" {
		name = "takohost"
	}
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", name)), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing resource: %w", err)
	}
	var bopts []sdktrace.BatchSpanProcessorOption
	if cfg.BatchTimeout > 0 {
		bopts = append(bopts, sdktrace.WithBatchTimeout(cfg.BatchTimeout))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, bopts...), sdktrace.WithResource(res))
	return newTracing(tp), nil
}

func newTracing(tp *sdktrace.TracerProvider) *Tracing {
	return &Tracing{
		provider: tp,
		tracer:   tp.Tracer("github.com/takoform/queuehost/telemetry"),
		prop:     propagation.TraceContext{},
	}
}

// Shutdown exports the spans still buffered and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// Middleware carries the W3C trace context of each incoming request
// (traceparent, tracestate) in its context, so that a send the request
// makes (a fetch handler's Binding send, a publish) is a child of the
// caller's span.
func (t *Tracing) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("traceparent") != "" {
			r = r.WithContext(t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
		}
		next.ServeHTTP(w, r)
	})
}

// Attribute keys beyond the semantic conventions'.
const (
	attrQueueUID = attribute.Key("takoform.queue.uid")
	attrBatchID  = attribute.Key("takoform.batch.id")
	attrAttempt  = attribute.Key("takoform.message.attempt")
	attrOutcome  = attribute.Key("takoform.batch.outcome")
	attrLink     = attribute.Key("takoform.link")
)

// The messaging semantic conventions' keys.
const (
	semSystem        = attribute.Key("messaging.system")
	semOpType        = attribute.Key("messaging.operation.type")
	semOpName        = attribute.Key("messaging.operation.name")
	semDestination   = attribute.Key("messaging.destination.name")
	semMessageID     = attribute.Key("messaging.message.id")
	semBatchCount    = attribute.Key("messaging.batch.message_count")
	semConsumerGroup = attribute.Key("messaging.consumer.group.name")
	semBodySize      = attribute.Key("messaging.message.body.size")
	semErrorType     = attribute.Key("error.type")
)

// System is the messaging.system of every span.
const System = "takoform"

var _ delivery.Tracer = (*Tracing)(nil)

func queueAttrs(q delivery.TracedQueue, op, name string) []attribute.KeyValue {
	return []attribute.KeyValue{semSystem.String(System), semOpType.String(op), semOpName.String(name),
		semDestination.String(q.Name), attrQueueUID.String(q.UID)}
}

// Send implements delivery.Tracer.
func (t *Tracing) Send(ctx context.Context, q delivery.TracedQueue, n int) (string, func([]string, error)) {
	attrs := queueAttrs(q, "send", "send")
	if n > 1 {
		attrs = append(attrs, semBatchCount.Int(n))
	}
	_, span := t.tracer.Start(ctx, "send "+q.Name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	return traceParent(span.SpanContext()), func(ids []string, err error) {
		if len(ids) == 1 {
			span.SetAttributes(semMessageID.String(ids[0]))
		}
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
			span.SetAttributes(semErrorType.String(abi.Code(err)))
		}
		span.End()
	}
}

// traceParent is sc as a W3C traceparent header value.
func traceParent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	return fmt.Sprintf("00-%s-%s-%02x", sc.TraceID(), sc.SpanID(), byte(sc.TraceFlags()))
}

// spanContext parses a traceparent the engine stored; invalid: the zero
// SpanContext.
func (t *Tracing) spanContext(tp string) trace.SpanContext {
	if tp == "" {
		return trace.SpanContext{}
	}
	ctx := t.prop.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
	return trace.SpanContextFromContext(ctx)
}
