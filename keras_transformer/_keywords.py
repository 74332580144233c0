"""Options that were positional, made keyword-only without breaking callers
for one release.

A public method takes its input positionally and everything else by
keyword (`generate(prompts, *, max_new_tokens=...)`). Options that callers
could pass by position before are still accepted there, in their old order,
with a `DeprecationWarning` naming them; the next release drops this.
"""

import functools
import inspect
import warnings


def positional_deprecated(*names):
    """Decorator: `names`, the keyword-only options of the decorated
    function in the order they were once positional, may still be passed
    by position, with a `DeprecationWarning`.

    Example:
        >>> import warnings
        >>> @positional_deprecated("times")
        ... def repeat(text, *, times=2):
        ...     return text * times
        >>> repeat("ab", times=3)
        'ababab'
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     repeat("ab", 3)
        'ababab'
        >>> caught[0].category.__name__
        'DeprecationWarning'
    """

    def decorate(function):
        parameters = inspect.signature(function).parameters.values()
        keyword_only = {p.name for p in parameters if p.kind == p.KEYWORD_ONLY}
        if set(names) - keyword_only:
            raise ValueError(  # a mistake in this package, found at import
                f"`names` must be keyword-only options of "
                f"{function.__qualname__}. Received: {names}"
            )
        positional = sum(
            p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters
        )

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            if len(args) > positional:
                extra = args[positional:]
                if len(extra) > len(names):
                    raise TypeError(
                        f"{function.__qualname__}() takes at most "
                        f"{positional + len(names)} positional arguments. "
                        f"Received: {len(args)}"
                    )
                moved = names[: len(extra)]
                for name, value in zip(moved, extra, strict=True):
                    if name in kwargs:
                        raise TypeError(
                            f"{function.__qualname__}() got {name!r} both by "
                            f"position and by keyword."
                        )
                    kwargs[name] = value
                warnings.warn(
                    f"{function.__qualname__}(): passing "
                    f"{', '.join(f'`{n}`' for n in moved)} by position is "
                    f"deprecated and stops working in the next release; pass "
                    f"{'it' if len(moved) == 1 else 'them'} by keyword "
                    f"(`{moved[0]}=...`).",
                    DeprecationWarning,
                    stacklevel=2,
                )
                args = args[:positional]
            return function(*args, **kwargs)

        return wrapper

    return decorate


def renamed(**old_names):
    """Decorator: each old keyword (`old=new`) of the decorated function is
    still accepted for one release, with a `DeprecationWarning` naming the
    new one; passing both is a TypeError.

    Example:
        >>> import warnings
        >>> @renamed(count="times")
        ... def repeat(text, *, times=2):
        ...     return text * times
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     repeat("ab", count=3)
        'ababab'
        >>> str(caught[0].message)
        '`count` is deprecated; use `times`. Received: count=3'
    """

    def decorate(function):
        known = inspect.signature(function).parameters
        if set(old_names.values()) - set(known) or set(old_names) & set(known):
            raise ValueError(  # a mistake in this package, found at import
                f"`old_names` must map old names to {function.__qualname__}'s "
                f"new ones. Received: {old_names}"
            )

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            for old, new in old_names.items():
                if old not in kwargs:
                    continue
                if new in kwargs:
                    raise TypeError(
                        f"{function.__qualname__}() got both `{old}` (deprecated) "
                        f"and `{new}`. Received: {old}={kwargs[old]!r}, "
                        f"{new}={kwargs[new]!r}"
                    )
                warnings.warn(
                    f"`{old}` is deprecated; use `{new}`. "
                    f"Received: {old}={kwargs[old]!r}",
                    DeprecationWarning,
                    stacklevel=2,
                )
                kwargs[new] = kwargs.pop(old)
            return function(*args, **kwargs)

        return wrapper

    return decorate
