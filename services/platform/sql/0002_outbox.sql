-- Transactional outbox: a service writes its state change and the events it must publish in
-- ONE Postgres transaction (rows here); a relay publishes unpublished rows to Kafka in id order
-- and then sets published_at. A crash between publish and update republishes the row, so
-- consumers must dedupe by the envelope's event_id (at-least-once, never lost).
CREATE TABLE outbox (
    id            bigserial   PRIMARY KEY,
    topic         text        NOT NULL,
    key           bytea,
    -- The encoded envelope exactly as it goes on the wire (bytes, so the relay never re-encodes).
    payload       bytea       NOT NULL,
    -- Kafka headers as [[name, base64 value], ...] (traceparent of the writing transaction).
    headers       jsonb       NOT NULL DEFAULT '[]'::jsonb,
    created_at    timestamptz NOT NULL DEFAULT now(),
    published_at  timestamptz
);
-- The relay's scan: only unpublished rows, oldest first; stays small as rows get published.
CREATE INDEX outbox_unpublished ON outbox (id) WHERE published_at IS NULL;
