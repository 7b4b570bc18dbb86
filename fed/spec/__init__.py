"""The run spec: every run option, parsed once into typed sections (fed.spec.run_spec), validated once and serialised
once for Flower; it imports the option help texts (fed.config), the heterogeneity registry and the few core parsers
and limits it checks options against (sampling, policy limits, classifier choices, the randomizer registry)."""
