"""Built-in checks: every module here registers its checks with ``@check`` on import."""
