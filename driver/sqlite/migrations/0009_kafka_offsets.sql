-- A stream consumer's positions (package broker/kafka), written in the
-- same transaction as the effects: the next offset to consume per
-- (group, topic, partition).
CREATE TABLE IF NOT EXISTS idem_kafka_offsets (
	group_id TEXT NOT NULL,
	topic TEXT NOT NULL,
	partition INTEGER NOT NULL,
	next_offset INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	PRIMARY KEY (group_id, topic, partition)
) WITHOUT ROWID;
