@HostAPI-v2 @admission
Feature: Host API v2 admission of the request envelope

  @HAPI-ADM-1 @HAPI-PROB-1 @HAPI-TRANS-2
  Scenario Outline: a Form URL that is not exactly one of the Forms is unknown_form
    When I POST "/v2/spaces/{{space}}/resources" with body:
      """
      {"name": "q", "formUrl": "<formUrl>", "spec": {"messageRetentionSeconds": 60}}
      """
    Then the request is refused with 422 "unknown_form"

    Examples:
      | formUrl                                                        |
      | https://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.2.0   |
      | https://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.1.0/  |
      | https://edge.forms.takoform.com/forms/atleastoncequeue/0.2.0/  |

  @HAPI-ADM-1
  Scenario: an unknown offering is unknown_offering
    When I POST "/v2/spaces/{{space}}/resources" with body:
      """
      {"name": "q", "formUrl": "https://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.2.0/", "offering": "kit-no-such-offering", "spec": {"messageRetentionSeconds": 60}}
      """
    Then the request is refused with 422 "unknown_offering"

  @HAPI-ADM-2 @HAPI-ADM-3
  Scenario Outline: a malformed envelope is invalid_request
    When I POST "/v2/spaces/{{space}}/resources" with body:
      """
      <body>
      """
    Then the request is refused with 400 "invalid_request"
    And the listing holds exactly 0 resources named "q"
    And the space lists no operations

    Examples:
      | body                                                                                                                       |
      | {"name": "q", "formUrl": "https://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.2.0/", "spec": {"messageRetentionSeconds": 60}, "labels": {}} |
      | {"name": "Q_1", "formUrl": "https://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.2.0/", "spec": {"messageRetentionSeconds": 60}} |
      | {"formUrl": "https://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.2.0/", "spec": {"messageRetentionSeconds": 60}} |
      | {"name": "q", "formUrl": "https://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.2.0/", "spec": {"messageRetentionSeconds": 60} |
      | not json                                                                                                                   |

  @HAPI-TRANS-1
  Scenario: a body that is not application/json is invalid_request
    Given the next request carries header "Content-Type": text/plain
    When I POST "/v2/spaces/{{space}}/resources" with body:
      """
      {"name": "q", "formUrl": "https://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.2.0/", "spec": {"messageRetentionSeconds": 60}}
      """
    Then the request is refused with 400 "invalid_request"

  @HAPI-AUTH-1
  Scenario: the OpenAPI document and the capabilities need no token; every other route does
    When I act without a token
    And I GET "/v2/openapi.json"
    Then the response status is 200
    When I GET "/v2/capabilities"
    Then the response status is 200
    When I GET "/v2/spaces/{{space}}/operations"
    Then the request is refused with 401 "unauthenticated"

  @HAPI-RES-1
  Scenario Outline: a space name outside the resource-name rule is invalid_request, before authentication
    When I act without a token
    And I GET "/v2/spaces/<space>/resources"
    Then the request is refused with 400 "invalid_request"

    Examples:
      | space     |
      | Bad_Space |
      | %2A       |
      | -kit      |

  @HAPI-TRANS-3
  Scenario Outline: an integer query parameter written another way than the host writes integers is invalid_request
    When I GET "/v2/spaces/{{space}}/resources?limit=<limit>"
    Then the request is refused with 400 "invalid_request"

    Examples:
      | limit |
      | 007   |
      | -0    |
      | %2B5  |
      | 5.0   |

  @HAPI-RES-5
  Scenario: resources are listed a page at a time, oldest first, and a bad page is refused
    Given a queue "q1"
    And a queue "q2"
    And a queue "q3"
    Then listing the "AtLeastOnceQueue" resources 1 at a time yields 3 resources, oldest first, each once
    And listing the "AtLeastOnceQueue" resources 2 at a time yields 3 resources, oldest first, each once
    When I GET "/v2/spaces/{{space}}/resources?pageToken=bm9wZQ"
    Then the request is refused with 400 "invalid_request"
    When I GET "/v2/spaces/{{space}}/resources?limit=0"
    Then the request is refused with 400 "invalid_request"
    When I GET "/v2/spaces/{{space}}/resources?limit=501"
    Then the request is refused with 400 "invalid_request"
    When I GET "/v2/spaces/{{space}}/resources?limit=500"
    Then the response status is 200

  @HAPI-TRANS-2
  Scenario: every response carries X-Request-Id, and a client's own request ID is echoed
    When I GET "/v2/spaces/{{space}}/resources"
    Then the response status is 200
    And the response carries header "X-Request-Id"
    Given the next request carries header "X-Request-Id": kit-request-1
    When I GET "/v2/spaces/{{space}}/resources"
    Then the response carries header "X-Request-Id" with value "kit-request-1"
    Given the next request carries header "X-Request-Id": kit-request-2
    When I GET "/v2/spaces/{{space}}/resources/{{nouid}}"
    Then the request is refused with 404 "not_found"
    And the response carries header "X-Request-Id" with value "kit-request-2"
