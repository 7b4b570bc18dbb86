"""The run spec: every run option, parsed once into typed sections (fed.spec.run_spec), validated once and
serialised once for Flower; imports only the option catalogue (fed.config), the heterogeneity registry and the
randomizer registry."""
