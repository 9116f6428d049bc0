"""gagpo's estimators inside verl: ``registry.register()`` puts them in verl's advantage registry (verl
does it by itself at ``import verl`` through the ``verl.plugins`` entry point, ``plugin.py``);
``bridge`` maps verl's batch to a ``StepBatch`` and the advantages back to tokens."""
