-- Deploy templates (Ironic's /v1/deploy_templates, API 1.55): a trait name
-- and its deploy steps.

-- name: InsertTemplate :one
INSERT INTO deploy_templates (uuid, name, steps, extra)
VALUES (@uuid, @name, @steps, @extra)
RETURNING *;

-- name: GetTemplateByUUID :one
SELECT * FROM deploy_templates WHERE uuid = @uuid;

-- name: GetTemplateByName :one
SELECT * FROM deploy_templates WHERE name = @name;

-- name: LockTemplate :one
-- The template, row-locked for a change or its deletion.
SELECT * FROM deploy_templates WHERE id = @id FOR UPDATE;

-- name: UpdateTemplate :one
UPDATE deploy_templates SET name = @name, steps = @steps, extra = @extra, updated_at = now()
 WHERE id = @id
RETURNING *;

-- name: DeleteTemplate :execrows
DELETE FROM deploy_templates WHERE id = @id;
