"""Issue 51, item 4: inputs Azure would refuse, refused first.

A resource id an option takes is checked against ARM's grammar (subscription GUID, resource
group name, provider namespace, types, names) before any call. Properties over ids generated
by that grammar: every well-formed id passes; an id with one broken segment is always refused,
in one sentence naming the option, the segment and the fix.
"""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from amlhpc.validate.azure_ids import (
    GALLERY_IMAGE,
    SUBNET,
    USER_IDENTITY,
    WORKSPACE_ID,
    resource_id_problem,
    workspace_problems,
)

KINDS = [SUBNET, USER_IDENTITY, GALLERY_IMAGE, WORKSPACE_ID]
SUB = "00000000-0000-0000-0000-000000000000"

guids = st.uuids().map(str) | st.uuids().map(lambda u: str(u).upper())
groups = st.text(st.sampled_from("abcXYZ019_().-"), min_size=1, max_size=90).filter(lambda s: not s.endswith("."))
names = st.text(st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters='<>*%&:\\?#/'),
                min_size=1, max_size=40).filter(lambda s: not s.endswith("."))


@st.composite
def valid_ids(draw, kind=None):
    """(kind, segments) of a well-formed id; the keywords in any case, as ARM reads them."""
    kind = kind or draw(st.sampled_from(KINDS))
    case = draw(st.sampled_from([str, str.lower, str.upper]))
    segs = [case("subscriptions"), draw(guids), case("resourceGroups"), draw(groups), case("providers"),
            case(kind.namespace)]
    for t in kind.types:
        segs += [case(t), draw(names)]
    return kind, segs


def as_id(segs: list[str]) -> str:
    return "/" + "/".join(segs)


@settings(derandomize=True, max_examples=150, deadline=None)
@given(valid_ids())
def test_ids_azure_takes_pass(drawn):
    kind, segs = drawn
    assert resource_id_problem("subnet", as_id(segs), kind) is None


BROKEN = {
    1: st.sampled_from(["sub-hpc", SUB[:-1], SUB + "0", SUB.replace("0", "g", 1), "", "{" + SUB + "}"]),
    3: st.sampled_from(["", "rg!", "rg.", "a" * 91, "rg hpc", "rg@x"]),
    5: st.sampled_from(["Microsoft", "Microsoft.Nework", "1Microsoft.Network", "Microsoft..Network", ""]),
}


@st.composite
def broken_ids(draw):
    """(kind, id, the broken segment's text) of an id with one segment Azure refuses."""
    kind, segs = draw(valid_ids())
    index = draw(st.sampled_from([0, 1, 2, 3, 4, 5, *range(6, len(segs))]))
    if index in BROKEN:
        bad = draw(BROKEN[index])
    elif index in (0, 2, 4) or index % 2 == 0:  # a keyword or a type
        bad = draw(st.sampled_from(["", "subscription", "resourceGroup", "provider", "virtualNetwork",
                                    "subnet", "identities", "x1"]))
    else:  # a name
        bad = draw(st.sampled_from(["", "a#b", "a?b", "a%20b", "name.", "name ", "a<b", "x\x01y", "a:b"]))
    if index == 5 and bad.lower() == kind.namespace.lower():
        bad = "Other.Provider"
    if index % 2 == 0 and index >= 6 and bad.lower() == kind.types[(index - 6) // 2].lower():
        bad = "x1"
    segs[index] = bad
    return kind, as_id(segs), bad


@settings(derandomize=True, max_examples=200, deadline=None)
@given(broken_ids())
@example((SUBNET, "/subscriptions/sub-hpc/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/s",
          "sub-hpc"))
def test_a_broken_segment_is_refused_and_named(drawn):
    kind, rid, bad = drawn
    problem = resource_id_problem("subnet", rid, kind)
    assert problem is not None, rid
    assert problem.startswith(f"subnet {rid!r}: ")
    assert repr(bad) in problem
    assert "give subnet the full resource id of" in problem and "--query id -o tsv" in problem


def test_a_subscription_that_is_not_a_guid_is_named_with_its_fix():
    rid = "/subscriptions/hpc-sub/resourceGroups/rg-net/providers/Microsoft.Network/virtualNetworks/vnet/subnets/nodes"
    assert resource_id_problem("subnet", rid, SUBNET) == (
        f"subnet {rid!r}: the subscription 'hpc-sub' is not a GUID (8-4-4-4-12 hexadecimal digits): give subnet "
        "the full resource id of a subnet (az network vnet subnet show -g <group> --vnet-name <vnet> -n <subnet> "
        "--query id -o tsv)")


def test_wrong_shape_and_provider_are_named():
    ident = f"/subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.ManagedIdentity/userAssignedIdentities/id"
    assert resource_id_problem("identity_resource_id", ident, USER_IDENTITY) is None
    in_identity = ident.replace("userAssignedIdentities", "virtualNetworks") + "/subnets/s"
    assert "should be Microsoft.Network" in resource_id_problem("subnet", in_identity, SUBNET)
    assert "segments where" in resource_id_problem("subnet", ident, SUBNET)
    assert "starts with '/'" in resource_id_problem("identity_resource_id", ident[1:], USER_IDENTITY)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(guids, groups, st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{2,32}", fullmatch=True))
def test_workspace_names_azure_takes_pass(sub, group, ws):
    assert workspace_problems("aml_job", sub, group, ws) == []


def test_workspace_names_azure_refuses_are_each_one_sentence():
    problems = workspace_problems("aml_job", "sub-hpc", "rg.", "w")
    assert [p.split(" ")[1] for p in problems] == ["subscription_id", "resource_group", "workspace_name"]
    assert all(p.startswith("aml_job: ") and ": give " in p for p in problems)
