-- pgq schema, version 20: the trace context an enqueue ran in.
-- `trace` holds the W3C trace context headers (`traceparent`, `tracestate`) of the enqueuing
-- code's active span, as JSON, when the application uses OpenTelemetry; NULL otherwise. The
-- worker links each attempt's span to it. No index: nothing looks jobs up by it, and a NULL
-- costs a bit in the row's null bitmap.
ALTER TABLE {schema}.jobs ADD COLUMN IF NOT EXISTS trace jsonb;
COMMENT ON COLUMN {schema}.jobs.trace IS
  'W3C trace context (traceparent, tracestate) of the enqueue, when it had one (OpenTelemetry).';
