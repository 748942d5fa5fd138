"""Budgets: USD accounts, the three enforcement layers and the hooks the agent loop sees."""
