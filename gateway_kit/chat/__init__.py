"""The chat-completions route: the request as the gateway reads it, and the endpoint.

- ``request``: read once, parsed once, validated once (OpenAI-shaped errors);
- ``meter``: the first response transform: usage read, the request priced, the cost told;
- ``endpoint``: the innermost app: admission, the upstream call, the response through the
  transform chain.
"""
