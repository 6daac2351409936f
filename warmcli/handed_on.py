"""What cc hands on to the tools it runs: the linker, the preprocessor, the assembler.

cc hands its linker each piece of `-Wl,a,b` (split at its commas) and the option after
`-Xlinker` whole; its preprocessor those of `-Wp,` and `-Xpreprocessor`, its assembler those of
`-Wa,` and `-Xassembler`. An `-X` flag's value is the next option whatever it is: in
`-Xlinker -Xlinker -specs=f` the linker is handed `-Xlinker` and cc reads `-specs=f` itself.
`handed_on` reads a kernel's options so, `tool_words` gives what one tool reads and
`handed_pieces` what one option hands on, for their readers: the linker's words and the files
they name (`warmcli.linked`), the preprocessor's options (`warmcli.computed_includes`) and the
options refused before cc runs (`warmcli.backends.host.building`). Pure functions over text: no
state; it never runs a tool.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence

# Each flag that hands the next option on, and the prefix that hands its pieces to that tool.
HANDED = {"-Xlinker": "-Wl,", "-Xpreprocessor": "-Wp,", "-Xassembler": "-Wa,"}
PREFIXES = tuple(HANDED.values())


def handed_pieces(option: str) -> list[str]:
    """What `option` hands on, split at its commas as cc splits it (`-Wl,a,b`: `a`, `b`; `-Wp,`
    and `-Wa,` alike), or the option alone where it hands nothing on."""
    return option[4:].split(",") if option.startswith(PREFIXES) else [option]


def handed_on(
    options: Sequence[str], flags: Collection[str] = tuple(HANDED)
) -> Iterator[tuple[str, str]]:
    """Each of `options` but a flag of `flags` that hands the next one on, with the prefix of
    the tool that flag hands it to (`-Wl,` after `-Xlinker`), or "" for one cc reads itself
    (`-Wl,a,b` too: `tool_words` splits it); a flag handed on hands nothing on."""
    handed = ""
    for option in options:
        if option in flags and not handed:
            handed = HANDED[option]
            continue
        yield option, handed
        handed = ""


def tool_words(options: Sequence[str], flag: str) -> Iterator[tuple[str, bool]]:
    """`options` as the tool `flag` hands options to reads them, each with whether cc hands it
    on: each piece of an option of its prefix (`-Wl,a,b`: `a`, `b`) and the option after
    `flag` whole, as handed; every other option as it is (another tool's too: `-Wp,-DX`)."""
    prefix = HANDED[flag]
    for option, handed in handed_on(options, (flag,)):
        if handed or not option.startswith(prefix):
            yield option, bool(handed)
        else:
            yield from ((piece, True) for piece in handed_pieces(option))
