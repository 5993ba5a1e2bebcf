-- A stream consumer's positions (package broker/kafka), written in the
-- same transaction as the effects: the next offset to consume per
-- (group, topic, partition).
CREATE TABLE IF NOT EXISTS idem_kafka_offsets (
	group_id text NOT NULL,
	topic text NOT NULL,
	partition integer NOT NULL,
	next_offset bigint NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (group_id, topic, partition)
);
