"""Built-in checks: every module here registers its checks with ``@check`` on import. None
imports another (tests/test_sdk.py holds them to it): what two checks share lives in
``layercheck.sdk`` or ``layercheck.numerics``."""
