-- +goose Up
-- Kind: expand. A new table only.
-- Deploy templates (package deploytemplate): a trait name and the deploy
-- steps it stands for, a JSON array of {interface, step, args, priority}
-- (Ironic keeps the steps in a table of their own to match templates to
-- instance traits when deploying, which metalloc does not do).
CREATE TABLE deploy_templates (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    uuid       uuid        NOT NULL UNIQUE,
    name       text        NOT NULL UNIQUE,
    steps      jsonb       NOT NULL DEFAULT '[]',
    extra      jsonb       NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz
);

-- +goose Down
DROP TABLE deploy_templates;
