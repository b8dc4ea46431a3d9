"""The request pipeline the layers plug into (DESIGN.md section 3a).

- ``context``: ``RequestContext``, the only channel between layers;
- ``body``: the request body, read once and replayed;
- ``response``: the response, started exactly once.
"""
