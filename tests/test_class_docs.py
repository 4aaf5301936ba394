"""What help() and a wrong keyword show of a message class, in both implementations:
a docstring for every class, defaults as an instance gets them (`members=[]`), and a
wrong keyword named with the class, its fields and the one meant."""

import inspect
import pydoc

import pytest


def test_every_class_has_a_docstring(impl):
    for cls in (*impl.REQUEST_CLASSES.values(), *impl.RESPONSE_CLASSES.values()):
        assert cls.__doc__, cls.__name__
        for name in dir(cls):
            nested = getattr(cls, name)
            if isinstance(nested, type) and nested.__qualname__.startswith(cls.__name__ + "."):
                assert nested.__doc__, nested.__qualname__


def test_a_class_without_a_definition_doc_says_what_it_is(impl):
    assert impl.MetadataRequest.__doc__ == (
        "The request of Kafka's Metadata API (key 3), versions 0-13. Fields: topics, "
        "allow_auto_topic_creation, include_cluster_authorized_operations, "
        "include_topic_authorized_operations."
    )
    assert impl.MetadataRequest.MetadataRequestTopic.__doc__ == (
        "Part of MetadataRequest (MetadataRequest.topics). Fields: topic_id, name."
    )
    # a definition's own doc wins
    assert impl.LeaveGroupRequest.__doc__.startswith("Removes one member")


def test_help_shows_defaults_as_an_instance_gets_them(impl):
    sig = str(inspect.signature(impl.LeaveGroupRequest))
    assert sig == "(*, group_id='', member_id='', members=[], unknown_tagged_fields=None)"
    assert "object at 0x" not in pydoc.render_doc(impl.LeaveGroupRequest)
    assert "object at 0x" not in pydoc.render_doc(impl.StreamsGroupHeartbeatRequest)
    # and they are made anew for each instance
    a, b = impl.LeaveGroupRequest(), impl.LeaveGroupRequest()
    assert a.members == [] and a.members is not b.members


def test_a_wrong_keyword_names_the_class_its_fields_and_the_one_meant(impl):
    with pytest.raises(TypeError) as e:
        impl.LeaveGroupRequest(group="orders")
    assert str(e.value) == (
        "LeaveGroupRequest has no field 'group' (did you mean 'group_id'?); its fields: "
        "group_id, member_id, members, unknown_tagged_fields"
    )
    with pytest.raises(TypeError, match=r"^LeaveGroupRequest\.MemberIdentity has no field 'x';"):
        impl.LeaveGroupRequest.MemberIdentity(x=1)
    # right keywords still work, and positional arguments are still refused by Python
    assert impl.LeaveGroupRequest(group_id="orders").group_id == "orders"
    with pytest.raises(TypeError):
        impl.LeaveGroupRequest("orders")


def test_positional_fields_are_refused_with_the_keyword_form(impl):
    with pytest.raises(TypeError) as err:
        impl.LeaveGroupRequest("orders", "m-1")
    assert str(err.value) == (
        "LeaveGroupRequest() takes its fields as keywords only (2 positional arguments "
        "given): LeaveGroupRequest(group_id=..., member_id=...)"
    )
    nested = impl.LeaveGroupRequest.MemberIdentity
    with pytest.raises(
        TypeError,
        match=r"1 positional argument given\): LeaveGroupRequest.MemberIdentity\(member_id=",
    ):
        nested("m-1")


def test_a_missing_attribute_is_named_in_the_package_with_what_was_meant():
    import fastkwire

    with pytest.raises(AttributeError) as err:
        fastkwire.LeaveGroupRequestt
    assert str(err.value) == (
        "module 'fastkwire' has no attribute 'LeaveGroupRequestt'; "
        "did you mean 'LeaveGroupRequest'?"
    )
    assert err.value.name == "LeaveGroupRequestt" and err.value.obj is fastkwire
    # (called directly: once imported, the submodule is an attribute like any other)
    with pytest.raises(AttributeError, match=r"fastkwire.records is a module; import it first"):
        fastkwire.__getattr__("records")
    assert not hasattr(fastkwire, "nothing_like_any_name")
