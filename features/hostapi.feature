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
