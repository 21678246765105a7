"""On top of everything: the read-only preflight questions to Google Cloud and the Hub (`preflight`), and what the
program declares it creates (`declared`), enforced deny by default by the policy pack (policy/). May import every
layer below.
"""
