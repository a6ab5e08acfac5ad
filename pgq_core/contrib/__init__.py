"""Integrations with other frameworks, each imported only by the applications that use it:
`pgq_core` itself never imports them, nor the frameworks they need."""
