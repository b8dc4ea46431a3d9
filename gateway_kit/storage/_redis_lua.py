"""The Lua scripts of ``RedisStorage``: one per atomic operation.

Every key a script touches is in its KEYS and shares one hash tag, so Redis Cluster runs it.
Times come from the server's ``TIME``. Lua numbers are doubles, so counters never pass through
them: they stay decimal strings, compared by ``cmp`` against bounds computed in Python with
exact integers. GCRA works in integer microseconds (exact in a double below 2**53) and mirrors
``gateway_kit.storage.base.gcra``.
"""

from __future__ import annotations

_COMMON = """
local function fail(code) error({err = code}) end

-- Compare two canonical decimal integers held as strings.
local function cmp(a, b)
  local an, bn = a:sub(1, 1) == '-', b:sub(1, 1) == '-'
  if an ~= bn then return an and -1 or 1 end
  local r = 0
  if #a ~= #b then r = (#a > #b) and 1 or -1 elseif a ~= b then r = (a > b) and 1 or -1 end
  return an and -r or r
end

local function counter(key)
  local v = redis.call('GET', key)
  if not v then return '0', false end
  if #v > 20 or not (v == '0' or v:match('^%-?[1-9]%d*$')) then fail('GK_NOT_COUNTER') end
  return v, true
end

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
"""

# KEYS: the counters, then the throttle key if any, then the keys to read.
# ARGV: n, then per counter (amount, refuse_above, max_current, min_current, ttl_ms), then
#       (interval_us, capacity, cost) when there is a throttle: ARGV's length says whether
#       there is one, and the KEYS left after the counters and the throttle are the reads.
# Returns {refused (0 none, -1 the throttle, i the i-th counter), throttled (0/1),
#          allowed, remaining, retry_after_us, reset_after_us, current values...,
#          read values (nil when absent)...}.
# The reads run before any write: they see the state before the step, and a read of a hash or
# a list fails (WRONGTYPE) while nothing is changed yet, since a script's writes made before
# an error are not undone. Without reads, the script skips them at the cost of one test.
INCR_MANY = (
    _COMMON
    + """
local n = tonumber(ARGV[1])
local throttled = #ARGV > 1 + 5 * n
local reads = #KEYS - n - (throttled and 1 or 0)
local got
if reads > 0 then
  got = {}
  for i = 1, reads do got[i] = redis.call('GET', KEYS[#KEYS - reads + i]) end
end
local cur, existed = {}, {}
for i = 1, n do cur[i], existed[i] = counter(KEYS[i]) end

local function gcra(key, now, interval, window, cost)
  local tat = tonumber(redis.call('GET', key) or now)
  if tat < now then tat = now end
  local new_tat = tat + cost * interval
  local allow_at = new_tat - window
  if allow_at > now then
    return false, 0, math.max(0, math.floor((now + window - tat) / interval)), allow_at - now,
      tat - now
  end
  return true, new_tat, math.floor((now + window - new_tat) / interval), 0, new_tat - now
end

local refused = 0
local t = {true, 0, 0, 0, 0}
local now, interval, window, cost
if throttled then
  now = now_us()
  interval, cost = tonumber(ARGV[2 + 5 * n]), tonumber(ARGV[4 + 5 * n])
  window = interval * tonumber(ARGV[3 + 5 * n])
  t = {gcra(KEYS[n + 1], now, interval, window, cost)}
  if not t[1] then refused = -1 end
end
if refused == 0 then
  for i = 1, n do
    local above = ARGV[3 + 5 * (i - 1)]
    if above ~= '' and cmp(cur[i], above) > 0 then refused = i break end
  end
  if refused > 0 and throttled then
    t = {gcra(KEYS[n + 1], now, interval, window, 0)}
  end
end
if refused == 0 then
  for i = 1, n do
    local b = 5 * (i - 1)
    if cmp(cur[i], ARGV[4 + b]) > 0 or cmp(cur[i], ARGV[5 + b]) < 0 then fail('GK_OVERFLOW') end
  end
  for i = 1, n do
    local b = 5 * (i - 1)
    redis.call('INCRBY', KEYS[i], ARGV[2 + b])
    if not existed[i] and ARGV[6 + b] ~= '0' then redis.call('PEXPIRE', KEYS[i], ARGV[6 + b]) end
  end
  if throttled and cost > 0 then
    local ttl = math.max(1, math.ceil((t[2] - now) / 1000))
    redis.call('SET', KEYS[n + 1], string.format('%.0f', t[2]), 'PX', ttl)
  end
end
local out = {refused, throttled and 1 or 0, t[1] and 1 or 0, t[3], t[4], t[5]}
for i = 1, n do out[6 + i] = cur[i] end
if got then for i = 1, reads do out[6 + n + i] = got[i] end end
return out
"""
)

# KEYS[1]; ARGV: expected present (0/1), expected, new present (0/1), new, ttl_ms (0: none).
CAS = """
local v = redis.call('GET', KEYS[1])
if ARGV[1] == '1' then
  if v ~= ARGV[2] then return 0 end
elseif v then
  return 0
end
if ARGV[3] == '0' then
  redis.call('DEL', KEYS[1])
elseif ARGV[5] ~= '0' then
  redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[5])
else
  redis.call('SET', KEYS[1], ARGV[4])
end
return 1
"""

# A log is a list, newest first, and a counter beside it: the newest entry's position (a log
# of an older version, without one, counts from its length).
# KEYS: the list, its counter; ARGV: max_len, then the values, oldest first.
LOG_APPEND = """
local top = redis.call('GET', KEYS[2])
top = top and tonumber(top) or redis.call('LLEN', KEYS[1])
for i = 2, #ARGV do
  redis.call('LPUSH', KEYS[1], ARGV[i])
end
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[1]) - 1)
redis.call('SET', KEYS[2], top + #ARGV - 1)
return 1
"""

# KEYS: the list, its counter; ARGV: limit, before (0: from the newest). Returns the first
# entry's position and the entries.
LOG_PAGE = """
local length = redis.call('LLEN', KEYS[1])
if length == 0 then return {0, {}} end
local top = redis.call('GET', KEYS[2])
top = top and tonumber(top) or length
local start = 0
local before = tonumber(ARGV[2])
if before > 0 then start = math.max(0, top - before + 1) end
return {top - start, redis.call('LRANGE', KEYS[1], start, start + tonumber(ARGV[1]) - 1)}
"""

# The queue's keys, in this order in every queue script's KEYS:
#   1 payload (hash id -> payload)     2 meta (hash id -> msgpack {state, attempts, due_at,
#   token, failed_at, reason})         3 ready (zset id by due time or lease end)
#   4 dead (zset id by failure time)   5 tokens (hash token -> id)   6 seq (the token counter)
# States: 'q' queued, 'l' leased, 'd' dead.
_QUEUE = """
local function meta(id)
  local m = redis.call('HGET', KEYS[2], id)
  if m then return cmsgpack.unpack(m) end
end
local function save(id, m) redis.call('HSET', KEYS[2], id, cmsgpack.pack(m)) end
local function num(x) return string.format('%.17g', x) end
local function drop(id)
  redis.call('HDEL', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
  redis.call('ZREM', KEYS[4], id)
end
local function leased(token)
  local id = redis.call('HGET', KEYS[5], token)
  if not id then return nil end
  redis.call('HDEL', KEYS[5], token)
  return id, meta(id)
end
"""

# ARGV: id, payload, due_at.
ENQUEUE = (
    _QUEUE
    + """
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
save(ARGV[1], {'q', 0, tonumber(ARGV[3]), 0, 0, ''})
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
return 1
"""
)

# ARGV: limit, lease. Returns {{id, payload, token, attempts, due_at}...}.
CLAIM = (
    _COMMON
    + _QUEUE
    + """
local now = now_us() / 1000000
local until_ = num(now + tonumber(ARGV[2]))
local ids = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', num(now), 'LIMIT', 0, ARGV[1])
local out = {}
for _, id in ipairs(ids) do
  local m = meta(id)
  if m[4] ~= 0 then redis.call('HDEL', KEYS[5], num(m[4])) end
  local token = redis.call('INCR', KEYS[6])
  m[1], m[2], m[4] = 'l', m[2] + 1, token
  save(id, m)
  redis.call('HSET', KEYS[5], token, id)
  redis.call('ZADD', KEYS[3], until_, id)
  out[#out + 1] = {id, redis.call('HGET', KEYS[1], id), token, m[2], num(m[3])}
end
return out
"""
)

# ARGV: token.
ACK = (
    _QUEUE
    + """
local id = leased(ARGV[1])
if not id then return 0 end
drop(id)
return 1
"""
)

# ARGV: token, due_at, has payload (0/1), payload.
RETRY = (
    _QUEUE
    + """
local id, m = leased(ARGV[1])
if not id then return 0 end
m[1], m[3], m[4] = 'q', tonumber(ARGV[2]), 0
save(id, m)
if ARGV[3] == '1' then redis.call('HSET', KEYS[1], id, ARGV[4]) end
redis.call('ZADD', KEYS[3], ARGV[2], id)
return 1
"""
)

# ARGV: token, reason.
DEAD = (
    _COMMON
    + _QUEUE
    + """
local id, m = leased(ARGV[1])
if not id then return 0 end
local now = now_us() / 1000000
m[1], m[4], m[5], m[6] = 'd', 0, now, ARGV[2]
save(id, m)
redis.call('ZREM', KEYS[3], id)
redis.call('ZADD', KEYS[4], num(now), id)
return 1
"""
)

# ARGV: limit. Returns {{id, payload, attempts, reason, failed_at}...}, oldest first.
DEAD_ITEMS = (
    _QUEUE
    + """
local out = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[4], 0, tonumber(ARGV[1]) - 1)) do
  local m = meta(id)
  out[#out + 1] = {id, redis.call('HGET', KEYS[1], id), m[2], m[6], num(m[5])}
end
return out
"""
)

# ARGV: id, due_at, has_payload, payload.
REQUEUE = (
    _QUEUE
    + """
local m = meta(ARGV[1])
if not m or m[1] ~= 'd' then return 0 end
save(ARGV[1], {'q', 0, tonumber(ARGV[2]), 0, 0, ''})
if ARGV[3] == '1' then redis.call('HSET', KEYS[1], ARGV[1], ARGV[4]) end
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
return 1
"""
)

# ARGV: id.
DISCARD = (
    _QUEUE
    + """
local m = meta(ARGV[1])
if not m then return 0 end
if m[4] ~= 0 then redis.call('HDEL', KEYS[5], num(m[4])) end
drop(ARGV[1])
return 1
"""
)

# Returns {ready (queued and leased), leased, dead}.
QUEUE_SIZE = """
return {redis.call('ZCARD', KEYS[3]), redis.call('HLEN', KEYS[5]), redis.call('ZCARD', KEYS[4])}
"""

#: Every script by the name of the operation it implements.
SCRIPTS = {
    "incr_many": INCR_MANY,
    "cas": CAS,
    "log_append": LOG_APPEND,
    "log_page": LOG_PAGE,
    "enqueue": ENQUEUE,
    "claim": CLAIM,
    "ack": ACK,
    "retry": RETRY,
    "dead": DEAD,
    "dead_items": DEAD_ITEMS,
    "requeue": REQUEUE,
    "discard": DISCARD,
    "queue_size": QUEUE_SIZE,
}
