"""Client-certificate names and Kafka's ssl.principal.mapping.rules."""

from __future__ import annotations

import pytest

from tidelog.web.cert_principal import MappingRuleError, PrincipalMapper, distinguished_name

SUBJECT = ((("countryName", "SE"),), (("organizationName", "Acme, Inc"),), (("organizationalUnitName", "ops"),),
           (("commonName", "shipper-1"),))


def test_the_name_is_most_specific_first_with_specials_escaped_as_java_writes_it() -> None:
    assert distinguished_name(SUBJECT) == "CN=shipper-1,OU=ops,O=Acme\\, Inc,C=SE"
    assert distinguished_name(((("commonName", "a"), ("userId", "7")),)) == "CN=a+UID=7"


@pytest.mark.parametrize(("rules", "name", "principal"), [
    ("DEFAULT", "CN=shipper-1,OU=ops,O=Acme,C=SE", "User:CN=shipper-1,OU=ops,O=Acme,C=SE"),
    ("RULE:^CN=(.*?),OU=(.*?),O=(.*?),C=(.*?)$/$1@$2/L,DEFAULT", "CN=Shipper-1,OU=Ops,O=Acme,C=SE",
     "User:shipper-1@ops"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT", "CN=app,OU=Other,O=x", "User:CN=app,OU=Other,O=x"),
    ("RULE:^CN=(.*?),.*$/$1/U", "CN=app,O=x", "User:APP"),
    ("RULE:^CN=(.*?)\\/(.*?),.*$/$1-$2/", "CN=a/b,O=x", "User:a-b"),
    ("RULE:^CN=admin,.*$/admin/", "CN=other,O=x", None),
])
def test_rules_map_as_kafkas_do(rules: str, name: str, principal: str | None) -> None:
    assert PrincipalMapper(rules).principal(name) == principal


@pytest.mark.parametrize("rules", ["", "RULE:abc", "NOPE", "RULE:(/x/"])
def test_rules_that_do_not_parse_are_refused(rules: str) -> None:
    with pytest.raises(MappingRuleError):
        PrincipalMapper(rules)
