-- The retention sweep deletes released keys past their window; this index
-- finds them without reading the whole table.
CREATE INDEX IF NOT EXISTS idem_keys_released ON idem_keys (updated_at) WHERE state = 'released';
