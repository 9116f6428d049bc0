"""verl's plugin entry point (``verl.plugins`` group, loaded by ``import verl``): registers gagpo's
estimators in verl's advantage registry (``integrations.verl.registry``)."""

from integrations.verl.registry import register

REGISTERED = register()
