-- Doors: the front door a job came through ('http', 'grpc', 'in-process'),
-- for its job document. Rows written before this migration came over HTTP.

ALTER TABLE jobs ADD COLUMN door TEXT NOT NULL DEFAULT 'http';
