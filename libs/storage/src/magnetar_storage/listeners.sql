-- name: forget_listeners
-- A starting process drops the listeners it no longer advertises ($2: those it does).
DELETE FROM advertised_listeners WHERE internal_url = $1 AND listener <> ALL($2::text[]);

-- name: publish_listeners
INSERT INTO advertised_listeners (internal_url, listener, url)
SELECT $1, l.listener, l.url FROM unnest($2::text[], $3::text[]) AS l (listener, url)
ON CONFLICT (internal_url, listener) DO UPDATE SET url = excluded.url, updated_at = now();

-- name: listeners_of
-- Lookups: the listeners of the processes at these internal URLs.
SELECT internal_url, listener, url FROM advertised_listeners WHERE internal_url = ANY($1::text[]);
