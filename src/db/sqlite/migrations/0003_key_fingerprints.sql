-- Keys chosen by an operator (PARLEY_ADMIN_KEY) kept their first 9 characters as their shown prefix:
-- shown now as the first 8 hex digits of their SHA-256 (api-keys.ts, shownPrefix), like new ones.
UPDATE `api_keys` SET `prefix` = 'sha256:' || substr(`hash`, 1, 8) WHERE NOT (`prefix` GLOB 'pk_*' AND length(`prefix`) = 9);
