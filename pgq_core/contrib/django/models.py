"""No Django model: pgq's tables live in its own schema, migrated by pgq itself (`apps.py`).
The module exists because Django sends `post_migrate` only to apps that have one."""
