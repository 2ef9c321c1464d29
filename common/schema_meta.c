/* schema_meta.c - embedded metaschemas of JSON Schema draft 2020-12 (the
 * dialect schema and its vocabulary schemas) and draft-07.  These are the
 * specification documents, written out compactly (titles and comments
 * trimmed); they let `$ref` / `$schema` to the standard URIs work offline.
 */
#include "schema_meta.h"

static const struct {
    const char *uri;
    const char *text;
} DOCS[] = {
    { "https://json-schema.org/draft/2020-12/schema",
        "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"$id\":\"https://json-schema.org/d"
        "raft/2020-12/schema\",\"$vocabulary\":{\"https://json-schema.org/draft/2020-12/vocab/core\":tru"
        "e,\"https://json-schema.org/draft/2020-12/vocab/applicator\":true,\"https://json-schema.org/d"
        "raft/2020-12/vocab/unevaluated\":true,\"https://json-schema.org/draft/2020-12/vocab/validati"
        "on\":true,\"https://json-schema.org/draft/2020-12/vocab/meta-data\":true,\"https://json-schema"
        ".org/draft/2020-12/vocab/format-annotation\":true,\"https://json-schema.org/draft/2020-12/vo"
        "cab/content\":true},\"$dynamicAnchor\":\"meta\",\"title\":\"Core and Validation specifications met"
        "a-schema\",\"allOf\":[{\"$ref\":\"meta/core\"},{\"$ref\":\"meta/applicator\"},{\"$ref\":\"meta/unevaluat"
        "ed\"},{\"$ref\":\"meta/validation\"},{\"$ref\":\"meta/meta-data\"},{\"$ref\":\"meta/format-annotation\""
        "},{\"$ref\":\"meta/content\"}],\"type\":[\"object\",\"boolean\"],\"properties\":{\"definitions\":{\"type\""
        ":\"object\",\"additionalProperties\":{\"$dynamicRef\":\"#meta\"},\"deprecated\":true,\"default\":{}},\""
        "dependencies\":{\"type\":\"object\",\"additionalProperties\":{\"anyOf\":[{\"$dynamicRef\":\"#meta\"},{\""
        "$ref\":\"meta/validation#/$defs/stringArray\"}]},\"deprecated\":true,\"default\":{}},\"$recursiveA"
        "nchor\":{\"$ref\":\"meta/core#/$defs/anchorString\",\"deprecated\":true},\"$recursiveRef\":{\"$ref\":"
        "\"meta/core#/$defs/uriReferenceString\",\"deprecated\":true}}}" },
    { "https://json-schema.org/draft/2020-12/meta/core",
        "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"$id\":\"https://json-schema.org/d"
        "raft/2020-12/meta/core\",\"$vocabulary\":{\"https://json-schema.org/draft/2020-12/vocab/core\":"
        "true},\"$dynamicAnchor\":\"meta\",\"type\":[\"object\",\"boolean\"],\"title\":\"Core vocabulary meta-sc"
        "hema\",\"properties\":{\"$id\":{\"$ref\":\"#/$defs/uriReferenceString\",\"pattern\":\"^[^#]*#?$\"},\"$sc"
        "hema\":{\"$ref\":\"#/$defs/uriString\"},\"$ref\":{\"$ref\":\"#/$defs/uriReferenceString\"},\"$anchor\":"
        "{\"$ref\":\"#/$defs/anchorString\"},\"$dynamicRef\":{\"$ref\":\"#/$defs/uriReferenceString\"},\"$dyna"
        "micAnchor\":{\"$ref\":\"#/$defs/anchorString\"},\"$vocabulary\":{\"type\":\"object\",\"propertyNames\":"
        "{\"$ref\":\"#/$defs/uriString\"},\"additionalProperties\":{\"type\":\"boolean\"}},\"$comment\":{\"type\""
        ":\"string\"},\"$defs\":{\"type\":\"object\",\"additionalProperties\":{\"$dynamicRef\":\"#meta\"}}},\"$def"
        "s\":{\"anchorString\":{\"type\":\"string\",\"pattern\":\"^[A-Za-z_][-A-Za-z0-9._]*$\"},\"uriString\":{\""
        "type\":\"string\",\"format\":\"uri\"},\"uriReferenceString\":{\"type\":\"string\",\"format\":\"uri-referen"
        "ce\"}}}" },
    { "https://json-schema.org/draft/2020-12/meta/applicator",
        "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"$id\":\"https://json-schema.org/d"
        "raft/2020-12/meta/applicator\",\"$vocabulary\":{\"https://json-schema.org/draft/2020-12/vocab/"
        "applicator\":true},\"$dynamicAnchor\":\"meta\",\"type\":[\"object\",\"boolean\"],\"title\":\"Applicator "
        "vocabulary meta-schema\",\"properties\":{\"prefixItems\":{\"$ref\":\"#/$defs/schemaArray\"},\"items\""
        ":{\"$dynamicRef\":\"#meta\"},\"contains\":{\"$dynamicRef\":\"#meta\"},\"additionalProperties\":{\"$dyna"
        "micRef\":\"#meta\"},\"properties\":{\"type\":\"object\",\"additionalProperties\":{\"$dynamicRef\":\"#met"
        "a\"},\"default\":{}},\"patternProperties\":{\"type\":\"object\",\"additionalProperties\":{\"$dynamicRe"
        "f\":\"#meta\"},\"propertyNames\":{\"format\":\"regex\"},\"default\":{}},\"dependentSchemas\":{\"type\":\"o"
        "bject\",\"additionalProperties\":{\"$dynamicRef\":\"#meta\"},\"default\":{}},\"propertyNames\":{\"$dyn"
        "amicRef\":\"#meta\"},\"if\":{\"$dynamicRef\":\"#meta\"},\"then\":{\"$dynamicRef\":\"#meta\"},\"else\":{\"$dy"
        "namicRef\":\"#meta\"},\"allOf\":{\"$ref\":\"#/$defs/schemaArray\"},\"anyOf\":{\"$ref\":\"#/$defs/schemaA"
        "rray\"},\"oneOf\":{\"$ref\":\"#/$defs/schemaArray\"},\"not\":{\"$dynamicRef\":\"#meta\"}},\"$defs\":{\"sch"
        "emaArray\":{\"type\":\"array\",\"minItems\":1,\"items\":{\"$dynamicRef\":\"#meta\"}}}}" },
    { "https://json-schema.org/draft/2020-12/meta/unevaluated",
        "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"$id\":\"https://json-schema.org/d"
        "raft/2020-12/meta/unevaluated\",\"$vocabulary\":{\"https://json-schema.org/draft/2020-12/vocab"
        "/unevaluated\":true},\"$dynamicAnchor\":\"meta\",\"type\":[\"object\",\"boolean\"],\"title\":\"Unevaluat"
        "ed applicator vocabulary meta-schema\",\"properties\":{\"unevaluatedItems\":{\"$dynamicRef\":\"#me"
        "ta\"},\"unevaluatedProperties\":{\"$dynamicRef\":\"#meta\"}}}" },
    { "https://json-schema.org/draft/2020-12/meta/validation",
        "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"$id\":\"https://json-schema.org/d"
        "raft/2020-12/meta/validation\",\"$vocabulary\":{\"https://json-schema.org/draft/2020-12/vocab/"
        "validation\":true},\"$dynamicAnchor\":\"meta\",\"type\":[\"object\",\"boolean\"],\"title\":\"Validation "
        "vocabulary meta-schema\",\"properties\":{\"type\":{\"anyOf\":[{\"$ref\":\"#/$defs/simpleTypes\"},{\"ty"
        "pe\":\"array\",\"items\":{\"$ref\":\"#/$defs/simpleTypes\"},\"minItems\":1,\"uniqueItems\":true}]},\"con"
        "st\":true,\"enum\":{\"type\":\"array\",\"items\":true},\"multipleOf\":{\"type\":\"number\",\"exclusiveMini"
        "mum\":0},\"maximum\":{\"type\":\"number\"},\"exclusiveMaximum\":{\"type\":\"number\"},\"minimum\":{\"type\""
        ":\"number\"},\"exclusiveMinimum\":{\"type\":\"number\"},\"maxLength\":{\"$ref\":\"#/$defs/nonNegativeIn"
        "teger\"},\"minLength\":{\"$ref\":\"#/$defs/nonNegativeIntegerDefault0\"},\"pattern\":{\"type\":\"strin"
        "g\",\"format\":\"regex\"},\"maxItems\":{\"$ref\":\"#/$defs/nonNegativeInteger\"},\"minItems\":{\"$ref\":\""
        "#/$defs/nonNegativeIntegerDefault0\"},\"uniqueItems\":{\"type\":\"boolean\",\"default\":false},\"max"
        "Contains\":{\"$ref\":\"#/$defs/nonNegativeInteger\"},\"minContains\":{\"$ref\":\"#/$defs/nonNegative"
        "Integer\",\"default\":1},\"maxProperties\":{\"$ref\":\"#/$defs/nonNegativeInteger\"},\"minProperties"
        "\":{\"$ref\":\"#/$defs/nonNegativeIntegerDefault0\"},\"required\":{\"$ref\":\"#/$defs/stringArray\"},"
        "\"dependentRequired\":{\"type\":\"object\",\"additionalProperties\":{\"$ref\":\"#/$defs/stringArray\"}"
        "}},\"$defs\":{\"nonNegativeInteger\":{\"type\":\"integer\",\"minimum\":0},\"nonNegativeIntegerDefault"
        "0\":{\"$ref\":\"#/$defs/nonNegativeInteger\",\"default\":0},\"simpleTypes\":{\"enum\":[\"array\",\"boole"
        "an\",\"integer\",\"null\",\"number\",\"object\",\"string\"]},\"stringArray\":{\"type\":\"array\",\"items\":{\""
        "type\":\"string\"},\"uniqueItems\":true,\"default\":[]}}}" },
    { "https://json-schema.org/draft/2020-12/meta/meta-data",
        "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"$id\":\"https://json-schema.org/d"
        "raft/2020-12/meta/meta-data\",\"$vocabulary\":{\"https://json-schema.org/draft/2020-12/vocab/m"
        "eta-data\":true},\"$dynamicAnchor\":\"meta\",\"type\":[\"object\",\"boolean\"],\"title\":\"Meta-data voc"
        "abulary meta-schema\",\"properties\":{\"title\":{\"type\":\"string\"},\"description\":{\"type\":\"string"
        "\"},\"default\":true,\"deprecated\":{\"type\":\"boolean\",\"default\":false},\"readOnly\":{\"type\":\"bool"
        "ean\",\"default\":false},\"writeOnly\":{\"type\":\"boolean\",\"default\":false},\"examples\":{\"type\":\"a"
        "rray\",\"items\":true}}}" },
    { "https://json-schema.org/draft/2020-12/meta/format-annotation",
        "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"$id\":\"https://json-schema.org/d"
        "raft/2020-12/meta/format-annotation\",\"$vocabulary\":{\"https://json-schema.org/draft/2020-12"
        "/vocab/format-annotation\":true},\"$dynamicAnchor\":\"meta\",\"type\":[\"object\",\"boolean\"],\"title"
        "\":\"Format vocabulary meta-schema for annotation results\",\"properties\":{\"format\":{\"type\":\"s"
        "tring\"}}}" },
    { "https://json-schema.org/draft/2020-12/meta/format-assertion",
        "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"$id\":\"https://json-schema.org/d"
        "raft/2020-12/meta/format-assertion\",\"$vocabulary\":{\"https://json-schema.org/draft/2020-12/"
        "vocab/format-assertion\":true},\"$dynamicAnchor\":\"meta\",\"type\":[\"object\",\"boolean\"],\"title\":"
        "\"Format vocabulary meta-schema for assertion results\",\"properties\":{\"format\":{\"type\":\"stri"
        "ng\"}}}" },
    { "https://json-schema.org/draft/2020-12/meta/content",
        "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"$id\":\"https://json-schema.org/d"
        "raft/2020-12/meta/content\",\"$vocabulary\":{\"https://json-schema.org/draft/2020-12/vocab/con"
        "tent\":true},\"$dynamicAnchor\":\"meta\",\"type\":[\"object\",\"boolean\"],\"title\":\"Content vocabular"
        "y meta-schema\",\"properties\":{\"contentEncoding\":{\"type\":\"string\"},\"contentMediaType\":{\"type"
        "\":\"string\"},\"contentSchema\":{\"$dynamicRef\":\"#meta\"}}}" },
    { "http://json-schema.org/draft-07/schema",
        "{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"$id\":\"http://json-schema.org/draft-0"
        "7/schema#\",\"title\":\"Core schema meta-schema\",\"definitions\":{\"schemaArray\":{\"type\":\"array\","
        "\"minItems\":1,\"items\":{\"$ref\":\"#\"}},\"nonNegativeInteger\":{\"type\":\"integer\",\"minimum\":0},\"no"
        "nNegativeIntegerDefault0\":{\"allOf\":[{\"$ref\":\"#/definitions/nonNegativeInteger\"},{\"default\""
        ":0}]},\"simpleTypes\":{\"enum\":[\"array\",\"boolean\",\"integer\",\"null\",\"number\",\"object\",\"string\""
        "]},\"stringArray\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"uniqueItems\":true,\"default\":[]"
        "}},\"type\":[\"object\",\"boolean\"],\"properties\":{\"$id\":{\"type\":\"string\",\"format\":\"uri-referenc"
        "e\"},\"$schema\":{\"type\":\"string\",\"format\":\"uri\"},\"$ref\":{\"type\":\"string\",\"format\":\"uri-refer"
        "ence\"},\"$comment\":{\"type\":\"string\"},\"title\":{\"type\":\"string\"},\"description\":{\"type\":\"strin"
        "g\"},\"default\":true,\"readOnly\":{\"type\":\"boolean\",\"default\":false},\"writeOnly\":{\"type\":\"bool"
        "ean\",\"default\":false},\"examples\":{\"type\":\"array\",\"items\":true},\"multipleOf\":{\"type\":\"numbe"
        "r\",\"exclusiveMinimum\":0},\"maximum\":{\"type\":\"number\"},\"exclusiveMaximum\":{\"type\":\"number\"},"
        "\"minimum\":{\"type\":\"number\"},\"exclusiveMinimum\":{\"type\":\"number\"},\"maxLength\":{\"$ref\":\"#/de"
        "finitions/nonNegativeInteger\"},\"minLength\":{\"$ref\":\"#/definitions/nonNegativeIntegerDefaul"
        "t0\"},\"pattern\":{\"type\":\"string\",\"format\":\"regex\"},\"additionalItems\":{\"$ref\":\"#\"},\"items\":{"
        "\"anyOf\":[{\"$ref\":\"#\"},{\"$ref\":\"#/definitions/schemaArray\"}],\"default\":true},\"maxItems\":{\"$"
        "ref\":\"#/definitions/nonNegativeInteger\"},\"minItems\":{\"$ref\":\"#/definitions/nonNegativeInte"
        "gerDefault0\"},\"uniqueItems\":{\"type\":\"boolean\",\"default\":false},\"contains\":{\"$ref\":\"#\"},\"ma"
        "xProperties\":{\"$ref\":\"#/definitions/nonNegativeInteger\"},\"minProperties\":{\"$ref\":\"#/defini"
        "tions/nonNegativeIntegerDefault0\"},\"required\":{\"$ref\":\"#/definitions/stringArray\"},\"additi"
        "onalProperties\":{\"$ref\":\"#\"},\"definitions\":{\"type\":\"object\",\"additionalProperties\":{\"$ref\""
        ":\"#\"},\"default\":{}},\"properties\":{\"type\":\"object\",\"additionalProperties\":{\"$ref\":\"#\"},\"def"
        "ault\":{}},\"patternProperties\":{\"type\":\"object\",\"additionalProperties\":{\"$ref\":\"#\"},\"proper"
        "tyNames\":{\"format\":\"regex\"},\"default\":{}},\"dependencies\":{\"type\":\"object\",\"additionalPrope"
        "rties\":{\"anyOf\":[{\"$ref\":\"#\"},{\"$ref\":\"#/definitions/stringArray\"}]}},\"propertyNames\":{\"$r"
        "ef\":\"#\"},\"const\":true,\"enum\":{\"type\":\"array\",\"items\":true},\"type\":{\"anyOf\":[{\"$ref\":\"#/def"
        "initions/simpleTypes\"},{\"type\":\"array\",\"items\":{\"$ref\":\"#/definitions/simpleTypes\"},\"minIt"
        "ems\":1,\"uniqueItems\":true}]},\"format\":{\"type\":\"string\"},\"contentMediaType\":{\"type\":\"string"
        "\"},\"contentEncoding\":{\"type\":\"string\"},\"if\":{\"$ref\":\"#\"},\"then\":{\"$ref\":\"#\"},\"else\":{\"$ref"
        "\":\"#\"},\"allOf\":{\"$ref\":\"#/definitions/schemaArray\"},\"anyOf\":{\"$ref\":\"#/definitions/schemaA"
        "rray\"},\"oneOf\":{\"$ref\":\"#/definitions/schemaArray\"},\"not\":{\"$ref\":\"#\"}},\"default\":true}" },
};

size_t schema_meta_count(void)
{
    return sizeof DOCS / sizeof DOCS[0];
}

const char *schema_meta_uri(size_t i)
{
    return i < schema_meta_count() ? DOCS[i].uri : "";
}

const char *schema_meta_text(size_t i)
{
    return i < schema_meta_count() ? DOCS[i].text : "";
}
