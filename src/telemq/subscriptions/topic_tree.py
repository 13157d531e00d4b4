"""The subscription trie: which subscriptions want a topic, and at what QoS.

One node per topic level; `+` and `#` are ordinary children with special
meaning during `match`. Matching follows, at each level, only the exact child,
`+` and `#`, and visits each node at most once: its work is bounded by the
nodes on paths that can match the topic (usually a few per level), never by
unrelated filters, and never exceeds the size of the trie whatever the
wildcards. Results are cached per topic name (most traffic repeats topics) and
the cache is dropped whenever a subscription changes, so it never serves stale
answers.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator

_CACHE_LIMIT = 16384  # topics
DEFAULT_CACHE_BYTES = 16 * 1024 * 1024  # characters of the cached topic names


class _Node:
    __slots__ = ("children", "subscribers")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.subscribers: dict[Hashable, int] = {}  # subscriber key -> granted QoS


class SubscriptionTree:
    """Topic filter -> {subscriber key: granted QoS}.

    A key is whatever the owner uses to name a subscriber: the broker's registry
    uses subscription ids.
    """

    __slots__ = ("_cache", "_cache_limit", "_root", "cache_bytes", "count", "filters")

    def __init__(self, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        """`cache_bytes`: the cache is dropped when its topic names grow past this (0: no
        bound), so long distinct topics cannot pin memory."""
        self._root = _Node()
        self._cache: dict[str, dict[Hashable, int]] = {}
        self._cache_limit = cache_bytes
        self.cache_bytes = 0
        self.count = 0  # subscriptions
        self.filters = 0  # distinct topic filters subscribed to (the "topics" of /metrics)

    def add(self, topic_filter: str, key: Hashable, qos: int) -> bool:
        """Subscribe (or re-subscribe with a new QoS); True when it is new."""
        node = self._root
        for level in topic_filter.split("/"):
            child = node.children.get(level)
            if child is None:
                child = node.children[level] = _Node()
            node = child
        is_new = key not in node.subscribers
        if not node.subscribers:
            self.filters += 1
        node.subscribers[key] = qos
        if is_new:
            self.count += 1
        self._cache.clear()
        self.cache_bytes = 0
        return is_new

    def remove(self, topic_filter: str, key: Hashable) -> bool:
        """Unsubscribe; True when the subscription existed. Prunes empty branches."""
        path: list[tuple[_Node, str]] = []
        node = self._root
        for level in topic_filter.split("/"):
            child = node.children.get(level)
            if child is None:
                return False
            path.append((node, level))
            node = child
        if node.subscribers.pop(key, None) is None:
            return False
        self.count -= 1
        if not node.subscribers:
            self.filters -= 1
        self._cache.clear()
        self.cache_bytes = 0
        for parent, level in reversed(path):
            child = parent.children[level]
            if child.subscribers or child.children:
                break
            del parent.children[level]
        return True

    def match(self, topic: str) -> dict[Hashable, int]:
        """Keys whose filters match `topic`, each with its highest granted QoS.

        The returned dict is shared with the cache: callers must not modify it.
        """
        cached = self._cache.get(topic)
        if cached is not None:
            return cached
        result = self.walk(topic)
        size = self.cache_bytes + len(topic)
        limit = self._cache_limit
        if len(self._cache) >= _CACHE_LIMIT or (limit and size > limit):
            self._cache.clear()
            size = len(topic)
        self.cache_bytes = size
        self._cache[topic] = result
        return result

    def walk(self, topic: str) -> dict[Hashable, int]:
        """`match` without its cache, for an owner that caches what it makes of the answer
        (the registry's routes): a second cache of every topic would cost each new topic
        name an entry, and a fleet's distinct topics would only churn it."""
        result: dict[Hashable, int] = {}
        levels = topic.split("/")
        last = len(levels)
        # (node, index of the next level to consume)
        stack: list[tuple[_Node, int]] = [(self._root, 0)]
        dollar = topic.startswith("$")
        while stack:
            node, index = stack.pop()
            children = node.children
            if not children:
                continue
            # [MQTT-4.7.2-1]: wildcards at the first level do not match '$' topics.
            wild_allowed = not (dollar and index == 0)
            if wild_allowed:
                multi = children.get("#")
                if multi is not None:
                    _merge(result, multi.subscribers)
            if index == last:
                continue
            exact = children.get(levels[index])
            if exact is not None:
                if index + 1 == last:
                    _merge(result, exact.subscribers)
                    # 'a/#' also matches 'a'
                    tail = exact.children.get("#")
                    if tail is not None:
                        _merge(result, tail.subscribers)
                else:
                    stack.append((exact, index + 1))
            if wild_allowed:
                single = children.get("+")
                if single is not None:
                    if index + 1 == last:
                        _merge(result, single.subscribers)
                        tail = single.children.get("#")
                        if tail is not None:
                            _merge(result, tail.subscribers)
                    else:
                        stack.append((single, index + 1))
        return result

    def filters_of(self, key: Hashable) -> Iterator[str]:
        """Every filter `key` holds (a full walk: for administration, not routing)."""
        stack: list[tuple[_Node, list[str]]] = [(self._root, [])]
        while stack:
            node, path = stack.pop()
            if key in node.subscribers and path:
                yield "/".join(path)
            for level, child in node.children.items():
                stack.append((child, [*path, level]))


def _merge(result: dict[Hashable, int], subscribers: dict[Hashable, int]) -> None:
    for key, qos in subscribers.items():
        if result.get(key, -1) < qos:
            result[key] = qos
