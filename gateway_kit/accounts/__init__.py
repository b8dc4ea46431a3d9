"""Accounts: who calls and what they may spend.

- ``workspaces``: the accounts themselves (id, e-mail, plan);
- ``keys``: API keys (hashed, rotated, revoked) and the ``Principal`` a key stands for;
- ``changes``: the change feed that keeps each process's cached keys, plans, caps and billing
  switches current;
- ``quota``: the storage layout of the request quota and burst limit;
- ``periods``: quota and budget periods (month, ISO week, day, in UTC);
- ``spend``: the spend ledger (reservations, settlements, caps, savings);
- ``wallet``: prepaid balances, credits and low-balance alerts.
"""
