"""gagpo inside other stacks, one room per partner: ``verl`` (gagpo's estimators in verl's advantage
registry) and ``openenv`` (gagpo's environments served as OpenEnv servers). They import estimators and
environments; nothing below them imports them."""
