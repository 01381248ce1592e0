@HostAPI-v2 @authorization
Feature: Authorisation
  Every route needs a token; roles are per space and may be narrowed to
  Forms; a reference grants no permission; producer Binding calls are
  authorised at call time for the principal the WorkerVersion runs as.

  Background:
    Given a queue "q"
    And a worker "w"

  Scenario: no token or an unknown token is unauthenticated
    When I act without a token
    And I GET "/v2/spaces/{{space}}/resources"
    Then the request is refused with 401 "unauthenticated"
    When I act with an unknown token
    And I GET "/v2/spaces/{{space}}/resources/{{uid:q}}"
    Then the request is refused with 401 "unauthenticated"

  @needs-viewer
  Scenario: a viewer reads but cannot create, update, delete or invoke
    When I act as the "viewer" principal
    And I read "q"
    Then the response status is 200
    When I create a queue "q2" with spec {"messageRetentionSeconds": 60}
    Then the request is refused with 403 "forbidden"
    When I update "q" with messageRetentionSeconds=120
    Then the request is refused with 403 "forbidden"
    When I delete "q"
    Then the request is refused with 403 "forbidden"
    When I invoke the fetch handler of "w"
    Then the request is refused with 403 "forbidden"
    And "q" still exists

  @needs-other
  Scenario: a principal without any grant in the space is told nothing exists there
    When I act as the "other" principal
    And I read "q"
    Then the request is refused with 404 "not_found"
    When I GET "/v2/spaces/{{space}}/resources"
    Then the request is refused with 404 "not_found"
    When I create a queue "q2" with spec {"messageRetentionSeconds": 60}
    Then the request is refused with 404 "not_found"

  @QueueConsumer-0.3.0 @QC-DELIV-5 @QC-OWN-9 @QC-CRUD-1 @QC-CRUD-2 @Q-REF-6
  @needs-narrow
  Scenario: a reference grants no permission: an editor of consumers who cannot read queues is forbidden
    When I act as the "narrow" principal
    And I create a consumer "c" of "q" by "w"
    Then the request is refused with 403 "forbidden"
    And the problem points at "/spec/queue"
    And the listing holds exactly 0 resources named "c"

  @needs-narrow
  Scenario: a principal narrowed to some Forms cannot read the others, and lists only what it may read
    When I act as the "narrow" principal
    And I read "q"
    Then the request is refused with 403 "forbidden"
    When I list the resources
    Then the response status is 200
    And the listing shows no "AtLeastOnceQueue" resources

  @AtLeastOnceQueue-0.2.0 @producer-binding @Q-MSG-11 @Q-REF-4 @Q-REF-6 @Q-BIND-13
  @needs-sender
  Scenario: producer calls are authorised at call time for the principal the version runs as
    When I act as the "sender" principal
    And I create an "ModuleWorker" named "pw" with spec:
      """
      {"handlers": ["fetch"]}
      """
    Then the request is accepted
    When I create a version "pw-v1" of "pw" with:
      """
      {"queueProducerBindings": [{"name": "TASKS", "resource": {"resourceUid": "{{uid:q}}"}}]}
      """
    Then the request is accepted
    When I replace the spec of "pw" with:
      """
      {"handlers": ["fetch"], "version": {"resourceUid": "{{uid:pw-v1}}"}}
      """
    Then the request is accepted
    When "pw" calls "TASKS" with:
      """
      {"op": "send", "body": {"string": "{\"tag\":\"x\"}"}}
      """
    Then the call rejects with "backend_unavailable"
